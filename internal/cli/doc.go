// Package cli is the skeleton the programs under cmd/ and bench/ share:
// how a command-line error becomes an exit status, usage that writes
// flags as --flag, a flag typo reported in two lines (the error, and a
// hint that may name the flag meant) instead of the whole usage, and the
// small flag parsers they have in common.
//
//	func main() { cli.Main("commhooks", run) }
//
//	func run(args []string, stdout, stderr io.Writer) error {
//		fs := cli.FlagSet("commhooks", stderr)
//		sizes := fs.String("sizes", "784,512,10", "layer widths")
//		if err := cli.Parse(fs, args); err != nil {
//			return err // exit status 2; 0 for --help
//		}
//		widths, err := cli.ParseInts(*sizes)
//		...
//	}
//
// Keeping run free of os.Exit and os.Args lets each program's tests call
// it with arguments and buffers; only Main touches the process.
package cli
