package shm_test

import (
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// Every chunk carries its call; a rank that issued something else is
// named with both calls described.
func ExampleCall() {
	mine := shm.Call{Op: pg.OpReduce, Bytes: 4096, Dtype: pg.Float32, Kind: pg.Sum, Root: 1}
	theirs := mine
	theirs.Root = 2
	fmt.Println(mine.Meta(7) == theirs.Meta(7))
	fmt.Println(theirs)
	// Output:
	// false
	// reduce of 4096 bytes of float32 (SUM) to root 2
}
