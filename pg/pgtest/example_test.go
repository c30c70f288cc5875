package pgtest_test

import (
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest"
)

// Reduce is the serial answer a backend's AllReduce must match.
func ExampleReduce() {
	ranks := []pg.Tensor{pg.Int32s([]int32{7, -7, 1}), pg.Int32s([]int32{0, 0, 2})}
	avg, _ := pgtest.Reduce(ranks, pg.Op(pg.Avg))
	fmt.Println(pg.View[int32](avg)) // integer AVG truncates toward zero

	got := pg.Float32s([]float32{1.5000001})
	want := pg.Float32s([]float32{1.5})
	fmt.Println(pgtest.Compare(got, want, pgtest.Tolerance(pg.Float32, 2)))
	fmt.Println(pgtest.Compare(got, want, 0))
	// Output:
	// [3 -3 1]
	// <nil>
	// element 0 is 1.5000001192092896, want 1.5 (bitwise)
}

// AllToAll is the serial answer for uneven splits: splits[i][j] elements
// go from rank i to rank j, and empty chunks are allowed.
func ExampleAllToAll() {
	ins := []pg.Tensor{pg.Int32s([]int32{1, 2, 3}), pg.Int32s([]int32{4})}
	splits := [][]int{
		{1, 2}, // rank 0 keeps [1] and sends [2 3] to rank 1
		{0, 1}, // rank 1 sends nothing to rank 0 and keeps [4]
	}
	outs, _ := pgtest.AllToAll(ins, splits)
	fmt.Println(pg.View[int32](outs[0]), pg.View[int32](outs[1]))
	// Output:
	// [1] [2 3 4]
}
