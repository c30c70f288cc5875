package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// hookByName builds --comm-hook's hook. PowerSGD takes torch's defaults
// but for --powersgd-rank and --powersgd-start-iter. Every call returns a
// new hook: a stateful one holds one rank's state.
func hookByName(c config) (commhook.Hook, error) {
	if !slices.Contains(commhook.Names(), c.commHook) {
		return nil, fmt.Errorf("--comm-hook %q: want one of %s", c.commHook, strings.Join(commhook.Names(), ", "))
	}
	o := commhook.DefaultPowerSGDOptions()
	o.MatrixApproximationRank, o.StartIter = c.powersgdRank, c.powersgdStartIter
	h, err := commhook.ByName(c.commHook, o)
	if err != nil {
		return nil, fmt.Errorf("--comm-hook %s with --powersgd-rank %d --powersgd-start-iter %d: %w", c.commHook,
			c.powersgdRank, c.powersgdStartIter, err)
	}
	return h, nil
}

// hookLabel names the hook and what its state's shape depends on, for
// checkpoints to record and resumes to check: "powersgd --powersgd-rank 2".
func hookLabel(c config) string {
	if c.commHook == "powersgd" || c.commHook == "batched-powersgd" {
		return fmt.Sprintf("%s --powersgd-rank %d", c.commHook, c.powersgdRank)
	}
	return c.commHook
}

// Note [comm hook state in checkpoints]: PowerSGD's error feedback is
// each rank's own, but rank 0 alone writes checkpoints. So at each
// checkpoint every rank's hook state is gathered to rank 0 (an allgather,
// which every rank issues at the same step), and rank 0 writes it into
// the checkpoint's extra vectors as commhook/rank<r>/<name>, in the same
// atomic write as the model: a checkpoint's hook state always belongs to
// its step. On --resume every rank reads the checkpoint (it does already,
// for the model) and loads its own rank's part.

const hookStatePrefix = "commhook/rank"

// gatherHookState collects every rank's hook state on rank 0: nil on the
// other ranks, and when the hook keeps none. Collective.
func gatherHookState(ctx context.Context, g pg.ProcessGroup, h commhook.Hook) (map[string][]float64, error) {
	s, ok := h.(commhook.Stateful)
	if !ok {
		return nil, nil
	}
	return gatherRankState(ctx, g, s.State(), hookStatePrefix, "the comm hook's state")
}

// gatherRankState gathers every rank's st on rank 0, keyed
// prefix<rank>/<key>: nil on the other ranks, and when st is empty on
// every rank. Every rank's st must hold the same keys and sizes; what
// names it in errors. Collective.
func gatherRankState(ctx context.Context, g pg.ProcessGroup, st map[string][]float64, prefix, what string) (
	map[string][]float64, error) {
	if len(st) == 0 {
		return nil, nil
	}
	keys := slices.Sorted(maps.Keys(st))
	var flat []float64
	layout := fnv.New64a()
	for _, k := range keys {
		flat = append(flat, st[k]...)
		fmt.Fprintf(layout, "%s:%d;", k, len(st[k]))
	}
	// Every rank's state has the same names and sizes (the model and the
	// buckets are the same): check that, then gather the values.
	header := []int64{int64(len(flat)), int64(layout.Sum64())}
	headers := make([]int64, 2*g.Size())
	if err := g.AllGather(ctx, pg.Int64s(headers), pg.Int64s(header)).Wait(ctx); err != nil {
		return nil, fmt.Errorf("gathering %s: %w", what, err)
	}
	for r := range g.Size() {
		if headers[2*r] != header[0] || headers[2*r+1] != header[1] {
			return nil, fmt.Errorf("gathering %s: rank %d's state is laid out differently from rank %d's", what, r,
				g.Rank())
		}
	}
	all := make([]float64, len(flat)*g.Size())
	if err := g.AllGather(ctx, pg.Float64s(all), pg.Float64s(flat)).Wait(ctx); err != nil {
		return nil, fmt.Errorf("gathering %s: %w", what, err)
	}
	if g.Rank() != 0 {
		return nil, nil
	}
	out := map[string][]float64{}
	for r := range g.Size() {
		rest := all[r*len(flat) : (r+1)*len(flat)]
		for _, k := range keys {
			out[prefix+strconv.Itoa(r)+"/"+k], rest = rest[:len(st[k])], rest[len(st[k]):]
		}
	}
	return out, nil
}

// restoreHookState loads this rank's part of ck's hook state into h.
func restoreHookState(ck *checkpoint.Checkpoint, rank, world int, h commhook.Hook, label string) error {
	mine := map[string][]float64{}
	ranks := map[string]bool{}
	for k, v := range ck.Extra {
		rest, ok := strings.CutPrefix(k, hookStatePrefix)
		if !ok {
			continue
		}
		r, key, _ := strings.Cut(rest, "/")
		ranks[r] = true
		if r == strconv.Itoa(rank) {
			mine[key] = v
		}
	}
	if len(ranks) == 0 {
		return nil // saved without a stateful hook: this one starts fresh
	}
	saved := ck.Meta["comm_hook"]
	s, ok := h.(commhook.Stateful)
	switch {
	case saved != "" && saved != label:
		return usagef("the checkpoint holds the state of --comm-hook %s; resume with it, not %s", saved, label)
	case len(ranks) != world:
		return usagef("the checkpoint holds comm hook state for %d ranks; resume with --nproc %d", len(ranks), len(ranks))
	case !ok:
		return usagef("the checkpoint holds comm hook state, but --comm-hook %s keeps none", label)
	}
	return s.LoadState(mine)
}
