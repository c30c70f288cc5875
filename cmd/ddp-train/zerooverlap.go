package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// zeroOverlaps are --zero-overlap's values: off, then torch's two hooks
// (optim.ZeroHookOptions.Deferred).
var zeroOverlaps = []string{"off", "interleaved", "deferred"}

// validateZero checks --zero and --zero-overlap against what the overlap
// cannot do: it steps each bucket as it arrives, so nothing may need all
// the gradients first.
func (c config) validateZero() error {
	switch {
	case !slices.Contains(zeroOverlaps, c.zeroOverlap):
		return usagef("--zero-overlap %q: want off, interleaved (each bucket stepped once its reduction completes) or "+
			"deferred (after backward, as torch's hook_with_zero_step)", c.zeroOverlap)
	case c.zeroReduce && c.zeroOverlap == "off":
		return usagef("--zero-reduce-to-owners needs --zero --zero-overlap interleaved or deferred: the owners reduce " +
			"and step each bucket as it arrives")
	case c.zeroReduce && c.commHook != "allreduce":
		return usagef("--zero-reduce-to-owners and --comm-hook %s: the reduction to owners replaces the comm hook; "+
			"use --comm-hook allreduce", c.commHook)
	case c.zeroOverlap == "off":
		return nil
	case !c.zero:
		return usagef("--zero-overlap %s needs --zero: it overlaps the sharded optimizer's step", c.zeroOverlap)
	case c.clipGradNorm > 0:
		return usagef("--zero-overlap and --clip-grad-norm: the norm needs every gradient before any step, and the " +
			"overlap steps each bucket as it arrives; use --clip-grad-value, or --zero without the overlap")
	case c.onNonFinite == "skip":
		return usagef("--zero-overlap and --on-nonfinite skip: a step cannot be skipped once some buckets have been " +
			"stepped; use --on-nonfinite fail, or --zero without the overlap")
	case c.findUnused:
		return usagef("--zero-overlap and --find-unused-parameters: the overlap steps parameters as their buckets " +
			"arrive and needs every parameter in every step; use --zero without the overlap")
	}
	return nil
}

// zeroHook wraps the comm hook in optim.Zero's overlap, with a broadcast
// group of its own (Note [ZeRO overlapped with backward]), when
// --zero-overlap asks for it; otherwise it returns inner.
func (s *session) zeroHook(ctx context.Context, c config, g pg.ProcessGroup, inner commhook.Hook) (commhook.Hook,
	error) {
	z, ok := s.opt.(*optim.Zero)
	if !ok || c.zeroOverlap == "off" {
		return inner, nil
	}
	var sp pg.Splitter
	if !pg.As(g, &sp) {
		return nil, fmt.Errorf("--zero-overlap: the %s process group cannot make a subgroup for the parameters' "+
			"broadcasts; use --zero without the overlap", pg.BackendName(g))
	}
	bcast, err := sp.NewGroup(ctx, everyRank(g.Size()))
	if err != nil {
		return nil, fmt.Errorf("--zero-overlap: the broadcast group: %w", err)
	}
	s.zeroBcast = bcast
	o := optim.ZeroHookOptions{Deferred: c.zeroOverlap == "deferred", ClipValue: c.clipGradValue,
		ReduceToOwners: c.zeroReduce, Timeline: s.tl}
	if o.ReduceToOwners {
		inner = nil // the owners' reduction replaces --comm-hook allreduce
	}
	s.zh, err = z.Hook(inner, bcast, o)
	if err != nil {
		return nil, err
	}
	return s.zh, nil
}

// beginZero arms the overlap before the step's synchronised backward: the
// schedule's rate, the parameters, the micro-batches to divide by.
func (s *session) beginZero(k int) error {
	if s.zh == nil {
		return nil
	}
	if err := s.opt.SetLR(s.sched.LR()); err != nil {
		return fmt.Errorf("the schedule's rate: %w", err)
	}
	params, err := s.eng.ParamTensors()
	if err != nil {
		return err
	}
	return s.zh.Begin(params, k)
}

// finishZero ends the overlapped step: the new parameters into place, the
// schedule on.
func (s *session) finishZero() error {
	if err := s.zh.Finish(); err != nil {
		return err
	}
	s.sched.Step()
	return nil
}

// everyRank is 0, 1, ..., n−1: a subgroup of every rank of a group of n.
func everyRank(n int) []int {
	ranks := make([]int, n)
	for r := range ranks {
		ranks[r] = r
	}
	return ranks
}
