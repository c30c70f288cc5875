package libnccl_test

import (
	"errors"
	"fmt"

	"github.com/goddp/ddp/libnccl"
)

// A missing library is one error that lists where Load looked and how to
// point it at NCCL.
func ExampleLoad() {
	_, err := libnccl.Load(libnccl.Options{Path: "/nonexistent/libnccl.so.2"})
	var le *libnccl.LoadError
	fmt.Println(errors.Is(err, libnccl.ErrNotFound), errors.As(err, &le), le.Tried[0][:26])
	// Output: true true /nonexistent/libnccl.so.2:
}

func ExampleMakeVersion() {
	v := libnccl.MakeVersion(2, 28, 3)
	fmt.Println(int(v), v, v >= libnccl.MakeVersion(2, 18, 0))
	// Output: 22803 2.28.3 true
}
