package dist_test

import (
	"context"
	"fmt"
	"time"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/pg"
)

// InitProcessGroup with the environment a launcher would set, read through
// Lookup here so the example does not depend on the process's own: a job
// of one rank (no peer, so no MASTER_ADDR or secret is needed). A program
// passes no options, and the same binary runs under ddp-train --nproc N,
// torchrun, mpirun and srun (see examples/multiproc).
func ExampleInitProcessGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	launcher := map[string]string{"RANK": "0", "WORLD_SIZE": "1"}
	g, err := dist.InitProcessGroup(ctx, dist.Options{
		Lookup: func(k string) (string, bool) { v, ok := launcher[k]; return v, ok },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	x := []float32{1, 2, 3}
	if err := g.AllReduce(ctx, pg.Float32s(x), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank %d of %d (%s, from %s): %v\n", g.Rank(), g.Size(), pg.BackendName(g), g.Env().Source, x)
	// Output: rank 0 of 1 (tcp, from torchrun): [1 2 3]
}
