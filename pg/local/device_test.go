package local_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// TestRefusesDeviceTensors: a host-only backend refuses device tensors at
// once with pg.ErrDeviceTensor, on one rank, without its peers.
func TestRefusesDeviceTensors(t *testing.T) {
	gs := start(t, 2, 10*time.Second)
	g := gs[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := pg.DeviceTensor(pg.Float32, 0, 0x1000, 16)
	h := pg.NewTensor(pg.Float32, 8)
	for name, w := range map[string]pg.Work{
		"allreduce": g.AllReduce(ctx, d, pg.Op(pg.Sum)),
		"broadcast": g.Broadcast(ctx, d, 0),
		"allgather": g.AllGather(ctx, h, d),
		"reduce":    g.Reduce(ctx, d, 0, pg.Op(pg.Sum)),
		"alltoall":  g.AllToAll(ctx, d, d, nil, nil),
		"send":      g.Send(ctx, d, 1, 0),
		"coalesced": g.AllReduceCoalesced(ctx, []pg.Tensor{h, d}, pg.Op(pg.Sum)),
	} {
		err := w.Wait(ctx)
		if !errors.Is(err, pg.ErrDeviceTensor) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "use an NCCL group or copy to host") {
			t.Errorf("%s of a device tensor: %v, want pg.ErrDeviceTensor", name, err)
		}
	}
}
