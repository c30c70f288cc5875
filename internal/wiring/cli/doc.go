// Package cli is the skeleton the programs under cmd/ and bench/ share:
// how a command-line error becomes an exit status, and the small flag
// parsers they have in common.
//
//	func main() { cli.Main("commhooks", run) }
//
//	func run(args []string, stdout, stderr io.Writer) error {
//		fs := cli.FlagSet("commhooks", stderr)
//		sizes := fs.String("sizes", "784,512,10", "layer widths")
//		if err := fs.Parse(args); err != nil {
//			return cli.Usage(err) // exit status 2; 0 for --help
//		}
//		widths, err := cli.ParseInts(*sizes)
//		...
//	}
//
// Keeping run free of os.Exit and os.Args lets each program's tests call
// it with arguments and buffers; only Main touches the process.
package cli
