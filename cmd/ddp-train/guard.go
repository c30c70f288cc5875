package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// Note [non-finite guard]
//
// A run whose loss or gradients turn NaN or infinite must not end "done"
// with garbage weights. Two checks, both agreed by every rank without a
// collective of their own:
//
//   - Before each bucket's allreduce the reducer checks this rank's own
//     gradients (reducer.Options.FindNonFiniteOrigin, --find-nonfinite-origin,
//     on by default): a NaN or an infinity is sent as zeros, so it never
//     reaches the other ranks, and the ranks agree (one allreduce of one
//     word per step) on an error naming the ranks, bucket and parameters
//     where it began. After each synchronised RunAll the reducer checks the
//     averaged gradients (reducer.Options.CheckFinite), for what the first
//     check cannot see (an overflow inside the fp16 hook). Both come the
//     same on every rank, at the same step. With
//     --on-nonfinite fail (the default) every rank stops before the
//     optimizer step; with skip, every rank skips that update (as loss
//     scaling skips a step whose gradients overflowed), and counts it.
//   - Each rank checks its own loss. The flag rides on the step's
//     stop-signal allreduce MAX (agreeStop), which comes before any
//     checkpoint of that step, so a diverged step is never saved.
//
// On a failure every rank gathers the others' loss flags (one small
// allgather, only then) to name the ranks whose loss went non-finite, and
// exits with exitDiverged. Parameters are checked before every checkpoint
// and before --save, so neither ever holds a NaN.

// exitDiverged is ddp-train's exit code for a run stopped by the
// non-finite guard: not retryable as it is (the same inputs diverge
// again), but not bad input either.
const exitDiverged = 3

// divergedError is a run stopped by the non-finite guard.
type divergedError struct{ msg string }

func (e *divergedError) Error() string { return e.msg }

// finiteLoss reports whether a loss value is finite.
func finiteLoss(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// lossRanks gathers every rank's loss flag (1: non-finite) and returns
// the ranks whose loss was not finite. Collective.
func (t *trainer) lossRanks(ctx context.Context, bad bool) ([]int, error) {
	mine := []int64{0}
	if bad {
		mine[0] = 1
	}
	all := make([]int64, t.g.Size())
	if err := t.g.AllGather(ctx, pg.Int64s(all), pg.Int64s(mine)).Wait(ctx); err != nil {
		return nil, fmt.Errorf("gathering the ranks' loss flags: %w", err)
	}
	var ranks []int
	for r, v := range all {
		if v != 0 {
			ranks = append(ranks, r)
		}
	}
	return ranks, nil
}

// diverged builds the guard's error for step (counted from 1): the ranks
// whose loss was not finite, and what else was.
func (t *trainer) diverged(ctx context.Context, step int, lossBad bool, what string) error {
	ranks, err := t.lossRanks(ctx, lossBad)
	if err != nil {
		return err
	}
	who := "no rank's loss was"
	if len(ranks) > 0 {
		s := make([]string, len(ranks))
		for i, r := range ranks {
			s[i] = fmt.Sprint(r)
		}
		who = "the loss of rank " + strings.Join(s, ",") + " was"
		if len(ranks) > 1 {
			who = "the loss of ranks " + strings.Join(s, ",") + " was"
		}
	}
	msg := fmt.Sprintf("training diverged at step %d: %s not finite", step, who)
	if what != "" {
		msg += "; " + what
	}
	msg += "; nothing of this step was saved (no --save, no checkpoint); lower --lr, check the data, or --on-nonfinite " +
		"skip to skip such steps"
	return &divergedError{msg: msg}
}

// nonFiniteGrads reports whether err is one of the reducer's non-finite
// gradient reports, and what it says, for the guard's message: where the
// NaN began (--find-nonfinite-origin: the ranks, bucket and parameters,
// found before the allreduce) or, without it, which averages hold one.
func nonFiniteGrads(err error) (string, bool) {
	var origin *reducer.NonFiniteOriginError
	if errors.As(err, &origin) {
		who := "rank " + joinInts(origin.Ranks)
		if len(origin.Ranks) > 1 {
			who = "ranks " + joinInts(origin.Ranks)
		}
		return fmt.Sprintf("the gradients of %s held a NaN or an infinity before their allreduce (bucket %d: %s; sent as "+
			"zeros, so no other rank received it)",
			who, origin.Bucket, strings.Join(origin.Names, ", ")), true
	}
	var nf *reducer.NonFiniteError
	if errors.As(err, &nf) {
		return "the averaged gradients of " + strings.Join(nf.Names, ", ") + " are not finite", true
	}
	if errors.Is(err, reducer.ErrNonFinite) { // --zero-overlap's hook, which says which parameter and bucket
		return err.Error(), true
	}
	return "", false
}

// paramsFinite checks every parameter's value, before a checkpoint or
// --save: the name of the first that holds a NaN or an infinity, or "".
func (s *session) paramsFinite() (string, error) {
	values, err := s.eng.ParamTensors()
	if err != nil {
		return "", err
	}
	for i, v := range values {
		if !reducer.Finite(v) {
			return s.params.Names[i], nil
		}
	}
	return "", nil
}
