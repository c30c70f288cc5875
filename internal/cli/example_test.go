package cli_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goddp/ddp/internal/cli"
)

// run is a program's body, as Main calls it.
func run(args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("widths", stderr)
	sizes := fs.String("sizes", "784,512,10", "layer widths, input first")
	if err := cli.Parse(fs, args); err != nil {
		return err // a usage error: exit status 2, or 0 for --help
	}
	widths, err := cli.ParseInts(*sizes)
	if err != nil {
		return cli.Usage(fmt.Errorf("--sizes: %v", err))
	}
	fmt.Fprintln(stdout, widths)
	return nil
}

func Example() {
	for _, args := range [][]string{{}, {"--sizes", "4, 2"}, {"--sizes", "4,0"}, {"--help"}} {
		err := run(args, io.Discard, io.Discard)
		fmt.Println(cli.Code(err), err, errors.Is(err, flag.ErrHelp))
	}
	fmt.Println(cli.Code(errors.New("disk full")))
	// Output:
	// 0 <nil> false
	// 0 <nil> false
	// 2 --sizes: "0" is not a positive integer false
	// 0 flag: help requested true
	// 1
}

// A flag typo is one line and a hint, with the flag that was meant when
// one is near: by name, or by the first words of its usage.
func ExampleReport() {
	fs := cli.FlagSet("train", io.Discard)
	fs.Float64("lr", 0.1, "learning rate")
	fs.Int("steps", 500, "optimizer steps")
	for _, args := range [][]string{{"--lerning-rate", "0.1"}, {"--step", "3"}, {"--lr", "fast"}} {
		err := cli.Parse(fs, args)
		cli.Report(os.Stdout, "train", err)
		fmt.Println("exit", cli.Code(err))
	}
	// Output:
	// train: flag provided but not defined: --lerning-rate
	// Did you mean --lr? Run 'train --help' for usage.
	// exit 2
	// train: flag provided but not defined: --step
	// Did you mean --steps? Run 'train --help' for usage.
	// exit 2
	// train: invalid value "fast" for flag --lr: parse error
	// Run 'train --help' for usage.
	// exit 2
}
