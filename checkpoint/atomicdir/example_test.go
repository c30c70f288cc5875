package atomicdir_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goddp/ddp/checkpoint/atomicdir"
)

func Example() {
	root, err := os.MkdirTemp("", "atomicdir-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "model")

	write := func(files ...string) error {
		return atomicdir.Write(dir, func(tmp string) error {
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(tmp, f), []byte(f), 0o644); err != nil {
					return err
				}
			}
			return nil
		})
	}
	list := func() {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		fmt.Println(strings.Join(names, " "))
	}

	if err := write("fc1.weight.npy", "fc1.bias.npy"); err != nil {
		fmt.Println(err)
	}
	list()
	if err := write("fc2.weight.npy"); err != nil {
		fmt.Println(err)
	}
	list()
	// Output:
	// fc1.bias.npy fc1.weight.npy
	// fc2.weight.npy
}
