package commhook_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/prometheus/client_golang/prometheus"
)

// With metrics on, the reducer counts the bytes a hook hands to
// collectives through a wrapper of its group. Adasum needs the group's
// Send and Recv, Hierarchical its Split: the wrapper must not hide them.
// Both hooks give the same bits with metrics as without, on pg/local and
// pg/tcp, and the count follows them into point-to-point calls and
// subgroups.
func TestHorovodHooksWithMetrics(t *testing.T) {
	const world, iters = 4, 3
	var mu sync.Mutex
	var made []*commhook.Hierarchical
	defer func() {
		for _, h := range made {
			h.Close()
		}
	}()
	hooks := map[string]func() commhook.Hook{
		"adasum": func() commhook.Hook { return commhook.NewAdasum() },
		"hierarchical": func() commhook.Hook {
			h, _ := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: 2})
			mu.Lock()
			made = append(made, h)
			mu.Unlock()
			return h
		},
	}
	backends := map[string]func() []pg.ProcessGroup{
		"local": func() []pg.ProcessGroup { return localGroups(t, world) },
		"tcp":   func() []pg.ProcessGroup { return tcpGroups(t, world, 0) },
	}
	planBytes := 0
	for _, p := range reducerParams {
		planBytes += 4 * p.Numel()
	}
	for _, backend := range []string{"local", "tcp"} {
		for _, name := range []string{"adasum", "hierarchical"} {
			t.Run(backend+"/"+name, func(t *testing.T) {
				want := trainObserved(t, backends[backend](), hooks[name], iters, nil)
				regs := make([]*prometheus.Registry, world)
				for r := range regs {
					regs[r] = prometheus.NewRegistry()
				}
				got := trainObserved(t, backends[backend](), hooks[name], iters, regs)
				for r := range got {
					if !slices.Equal(got[r], want[r]) {
						t.Fatalf("rank %d: other gradients with metrics than without", r)
					}
				}
				for r, reg := range regs {
					sent := hookBytes(t, reg, name, r)
					switch {
					case name == "adasum" && sent < float64(iters*planBytes):
						// Vector halving, distance doubling sends 3/2 of
						// the buffer; the norms' allreduces alone are tiny.
						t.Errorf("rank %d: adasum handed %v bytes to collectives in %d iterations of %d bytes: its sends were not "+
							"counted", r, sent, iters, planBytes)
					case name == "hierarchical":
						// One allgather of host keys, then per iteration a
						// reduce and a broadcast in the host, and on the
						// leaders (ranks 0 and 2) an allreduce between hosts.
						steps := 2
						if r%2 == 0 {
							steps = 3
						}
						if w := float64(8 + iters*steps*planBytes); sent != w {
							t.Errorf("rank %d: hierarchical handed %v bytes to collectives, want %v", r, sent, w)
						}
					}
				}
			})
		}
	}
}

// hookBytes reads rank's ddp_comm_bytes_total{hook}.
func hookBytes(t *testing.T, reg *prometheus.Registry, hook string, rank int) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ddp_comm_bytes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["hook"] == hook && labels["rank"] == fmt.Sprint(rank) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("rank %d: no ddp_comm_bytes_total{hook=%q}", rank, hook)
	return 0
}
