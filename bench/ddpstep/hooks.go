package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// newHook builds --hook's hook for one rank (ddp-train's --comm-hook
// names). The PowerSGD hooks compress from iteration --powersgd-start-iter
// (default 2, so that the timed steps compress), with torch's other
// defaults.
//
// --hook sync is not a comm hook a user would run: it leaves the bucket
// alone and allreduces one float32 per bucket, so that a DDP step
// synchronizes the ranks exactly when a real hook would, moving almost no
// data. Its ratio is the floor that the ranks' waiting for each other
// sets, whatever the transport.
func newHook(c config) (commhook.Hook, error) {
	if c.hook == "sync" {
		return syncHook{}, nil
	}
	if !slices.Contains(commhook.Names(), c.hook) {
		return nil, fmt.Errorf("--hook %q: want one of %s", c.hook, strings.Join(commhook.Names(), ", "))
	}
	o := commhook.DefaultPowerSGDOptions()
	o.MatrixApproximationRank, o.StartIter = c.powersgdRank, c.powersgdStartIter
	return commhook.ByName(c.hook, o)
}

// syncHook is --hook sync: one float32 allreduced per bucket, the bucket
// itself untouched (each rank keeps its own gradients, as with noop).
type syncHook struct{}

func (syncHook) Name() string { return "sync" }

func (syncHook) Run(ctx context.Context, g pg.ProcessGroup, _ *commhook.GradBucket) pg.Work {
	return g.AllReduce(ctx, pg.NewTensor(pg.Float32, 1), pg.Op(pg.Sum))
}
