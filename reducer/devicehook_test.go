package reducer

import (
	"context"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
)

// myAverage is a user's hook: the default allreduce under another name.
type myAverage struct{}

func (myAverage) Name() string { return "my_average" }
func (myAverage) Run(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	return commhook.Allreduce{}.Run(ctx, g, b)
}

// myDeviceAverage also says it averages on device buckets.
type myDeviceAverage struct{ myAverage }

func (myDeviceAverage) OnDevice(d pg.Dtype) (commhook.DeviceForm, error) {
	return commhook.DeviceForm{Kind: commhook.DeviceAverage, Wire: d}, nil
}

// The device path is chosen by what a hook implements, not by its name: a
// user's hook that implements commhook.DeviceHook gets device buckets and
// the host run's bits; the same hook without it keeps host buckets.
func TestDevicePathFollowsTheHooksInterface(t *testing.T) {
	ps := deviceParams(pg.Float32)
	c := deviceCase{n: 2, opts: Options{BucketCapBytes: 256, FirstBucketBytes: 64}}
	host, _ := runScript(t, groupsOf(t, "local", c.n), ps, c, 5)
	for _, tc := range []struct {
		hook   commhook.Hook
		device bool
	}{{myDeviceAverage{}, true}, {myAverage{}, false}} {
		c.hook = func() commhook.Hook { return tc.hook }
		var dev []pg.ProcessGroup
		for _, g := range fakeNCCL(t, c.n, nccltest.Options{}).Groups {
			dev = append(dev, g)
		}
		got, regs := runScript(t, dev, ps, c, 5)
		for r := range c.n {
			if onDevice := regs[r] != nil; onDevice != tc.device {
				t.Errorf("%T rank %d: device buckets %v, want device %v", tc.hook, r, regs[r], tc.device)
			}
			for i := range host[r] {
				if !slices.Equal(got[r][i], host[r][i]) {
					t.Fatalf("%T rank %d: result %d differs from the host run", tc.hook, r, i)
				}
			}
		}
	}
}
