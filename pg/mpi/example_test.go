//go:build mpi

package mpi_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/mpi"
)

// group is the world group this test binary's TestMain made (MPI can be
// initialised once per process).
func group() *mpi.Group { return mpi.SharedWorld() }

// A program started by mpirun -np N calls mpi.New once, then uses the group
// like any other: here every rank adds its rank+1 and takes the MAX of a
// constant, so the results say the same on every rank of every job size.
func Example() {
	ctx := context.Background()
	// g, err := mpi.New(ctx, mpi.Options{Timeout: time.Minute})
	// if err != nil { ... }
	// defer g.Close()
	g := group()
	x := pg.Int64s([]int64{int64(g.Rank() + 1)})
	y := pg.Float32s([]float32{1, 2})
	err := pg.WaitAll(ctx,
		g.AllReduce(ctx, x, pg.Op(pg.Sum)),
		g.AllReduce(ctx, y, pg.Op(pg.Max)))
	n := int64(g.Size())
	fmt.Println(pg.View[int64](x)[0] == n*(n+1)/2, pg.View[float32](y), err, g.Backend())
	// Output: true [1 2] <nil> mpi
}
