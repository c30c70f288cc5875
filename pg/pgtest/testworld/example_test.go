package testworld_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
)

// Parallel runs one function per rank at once and keeps each rank's error.
func ExampleParallel() {
	errs := testworld.Parallel(3, func(r int) error {
		if r == 2 {
			return fmt.Errorf("rank %d failed", r)
		}
		return nil
	})
	fmt.Println(errs)
	// Output: [<nil> <nil> rank 2 failed]
}

func TestGroupsAllReduce(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			gs := testworld.Groups(t, backend, 3)
			out := make([][]float32, 3)
			testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
				out[r] = []float32{float32(r + 1)}
				return g.AllReduce(context.Background(), pg.Float32s(out[r]), pg.Op(pg.Sum)).Wait(testworld.Ctx(t))
			}))
			for r, v := range out {
				if v[0] != 6 {
					t.Fatalf("rank %d: got %v, want 6", r, v[0])
				}
			}
		})
	}
}
