package reducer

import (
	"context"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// noHook communicates nothing; tests use it where the hook is beside the point.
type noHook struct{}

func (noHook) Run(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work {
	return pg.Completed(nil)
}
