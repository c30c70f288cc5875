package commhook_test

import (
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
)

// TestOnlyAllreduceHonoursDivisor: a Join that divides by the ranks still
// training (GradBucket.Divisor) changes the default allreduce only, as
// torch's div_factor does. PowerSGD before StartIter, batched PowerSGD
// and post-local SGD fall back to torch's default._allreduce_fut, which
// divides by its group's size: before the fix, their plain iterations
// divided by the Divisor, and post-local SGD's subgroup average by the
// number of ranks training in the whole group.
func TestOnlyAllreduceHonoursDivisor(t *testing.T) {
	const n = 2
	psgd := commhook.DefaultPowerSGDOptions() // StartIter 1000: plain allreduce
	for _, c := range []struct {
		name string
		hook func(g pg.ProcessGroup) (commhook.Hook, error)
		div  int // what the sum must be divided by
	}{
		{"allreduce", func(pg.ProcessGroup) (commhook.Hook, error) { return commhook.Allreduce{}, nil }, 1},
		{"powersgd", func(pg.ProcessGroup) (commhook.Hook, error) { return commhook.NewPowerSGD(psgd) }, n},
		{"batched-powersgd", func(pg.ProcessGroup) (commhook.Hook, error) { return commhook.NewBatchedPowerSGD(psgd) }, n},
		{"post-localsgd/global", func(g pg.ProcessGroup) (commhook.Hook, error) {
			return commhook.NewPostLocalSGD(testworld.Ctx(t), g,
				commhook.PostLocalSGDOptions{StartLocalSGDIter: 1000, RanksPerHost: n})
		}, n},
		{"post-localsgd/subgroup", func(g pg.ProcessGroup) (commhook.Hook, error) {
			return commhook.NewPostLocalSGD(testworld.Ctx(t), g,
				commhook.PostLocalSGDOptions{StartLocalSGDIter: 0, RanksPerHost: n})
		}, n},
		{"fp16", func(pg.ProcessGroup) (commhook.Hook, error) { return commhook.FP16Compress(), nil }, n},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := localGroups(t, n)
			got := make([][]float64, n)
			onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
				h, err := c.hook(g)
				if err != nil {
					return err
				}
				if cl, ok := h.(interface{ Close() error }); ok {
					defer cl.Close()
				}
				got[r] = []float64{float64(r + 1), float64(2 * (r + 1))} // sums 3 and 6
				b := &commhook.GradBucket{Buffer: pg.Float64s(got[r]), IsLast: true, Divisor: 1,
					Params: []commhook.ParamView{{Index: 0, Name: "p", Shape: []int{2}, Len: 2}}}
				return iterate(testworld.Ctx(t), h, g, []*commhook.GradBucket{b})
			})
			want := []float64{3 / float64(c.div), 6 / float64(c.div)}
			for r := range got {
				if got[r][0] != want[0] || got[r][1] != want[1] {
					t.Fatalf("rank %d: %v with Divisor 1; want %v, the sum divided by %d", r, got[r], want, c.div)
				}
			}
		})
	}
}
