package fsync_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/goddp/ddp/internal/fsync"
)

func Example() {
	dir, err := os.MkdirTemp("", "fsync-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, ".latest.tmp")
	if err := os.WriteFile(tmp, []byte("step-00010\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(dir, "latest")); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fsync.Dir(dir))                                  // the rename is now durable
	fmt.Println(fsync.Dir(filepath.Join(dir, "missing")) != nil) // no such directory
	// Output:
	// <nil>
	// true
}

func ExampleWriteFile() {
	dir, err := os.MkdirTemp("", "fsync-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "latest")
	err = fsync.WriteFile(path, func(w io.Writer) error {
		_, err := io.WriteString(w, "step-000000010\n")
		return err
	})
	fmt.Println(err)
	b, _ := os.ReadFile(path)
	fmt.Printf("%q\n", b)
	// Output:
	// <nil>
	// "step-000000010\n"
}
