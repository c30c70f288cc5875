package launch

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/pg"
)

// sumWorker is ExampleSelf's worker: it joins the job Self described with
// dist.InitProcessGroup and no options, allreduces its rank + 1 and
// prints the sum. It returns the exit code.
func sumWorker() int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := dist.InitProcessGroup(ctx, dist.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "joining:", err)
		return 1
	}
	defer g.Close()
	x := []float64{float64(g.Rank() + 1)}
	if err := g.AllReduce(ctx, pg.Float64s(x), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		return 1
	}
	fmt.Printf("rank %d of %d: sum %v\n", g.Rank(), g.Size(), x[0])
	return 0
}
