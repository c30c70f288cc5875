package main

// Note [stragglers, measured]: a rank that arrives last at the step's
// collectives waits least in them, and every other rank waits for it. So
// each rank measures how long it waited in collectives during the step
// (the communication left after backward, plus the previous step's stop
// check, where a rank slowed outside backward is waited for), and the
// step's stop-check allreduce (MAX, Note [preemption]) carries one slot
// per rank, each rank filling its own: afterwards every rank knows every
// rank's wait, without a collective of its own. The rank that waited
// least arrived last; by how much is the next-least wait minus its own,
// and the arrival skew is the largest wait minus the least.
//
// A step counts against the last rank when it was last by more than
// --straggler-margin of the step time; a rank that is so in more than
// --straggler-share of the last --straggler-window steps is named in a
// warning (by rank 0, once until it stops being one) and in
// ddp_straggler_last_total{rank}. On an even run the last rank is a
// matter of chance, and none comes near the share.

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// stragglerFlags tune the straggler warning: Note [stragglers, measured].
type stragglerFlags struct {
	stragglerWindow int     // --straggler-window: steps the share is over
	stragglerShare  float64 // --straggler-share: of them, the last rank's
	stragglerMargin float64 // --straggler-margin: by this much of the step time
	testSlow        slowRank
}

// slowRank is a pause on one rank in every step, for tests only
// (GODDP_TEST_SLOW_RANK=RANK:DURATION, read by run); rank -1: none.
type slowRank struct {
	rank int
	d    time.Duration
}

// testSlowEnv slows one rank on purpose, for tests of the straggler
// measure only: "1:30ms" pauses rank 1 for 30 ms in every step.
const testSlowEnv = "GODDP_TEST_SLOW_RANK"

func (f *stragglerFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.stragglerWindow, "straggler-window", 50, "name a rank that arrives last at the step's collectives in "+
		"more than --straggler-share of the last N steps (0: no warning)")
	fs.Float64Var(&f.stragglerShare, "straggler-share", 0.8, "see --straggler-window: the share of those steps")
	fs.Float64Var(&f.stragglerMargin, "straggler-margin", 0.1,
		"a step counts against the last rank when it was last by more than this fraction of the step time")
	f.testSlow.rank = -1
}

func (f stragglerFlags) validate() error {
	switch {
	case f.stragglerWindow < 0:
		return usagef("--straggler-window %d: want 0 or more", f.stragglerWindow)
	case f.stragglerShare <= 0 || f.stragglerShare > 1:
		return usagef("--straggler-share %v: want more than 0 and at most 1", f.stragglerShare)
	case f.stragglerMargin < 0:
		return usagef("--straggler-margin %v: want 0 or more", f.stragglerMargin)
	}
	return nil
}

// testSlowFrom reads testSlowEnv; a value it cannot read slows nothing.
func testSlowFrom(lookup func(string) (string, bool)) slowRank {
	v, _ := lookup(testSlowEnv)
	r, d, ok := strings.Cut(v, ":")
	rank, rerr := strconv.Atoi(r)
	dur, derr := time.ParseDuration(d)
	if !ok || rerr != nil || derr != nil {
		return slowRank{rank: -1}
	}
	return slowRank{rank: rank, d: dur}
}

// stragglers is one rank's view of who arrives last, step after step.
type stragglers struct {
	f       stragglerFlags
	rank    int
	log     *zap.Logger
	m       *trainingMetrics // nil: no metrics
	last    []int            // a ring over the window: the step's last rank by the margin, or -1
	lateBy  []time.Duration  // and by how much
	next    int
	steps   int           // observed
	check   time.Duration // the previous stop check's allreduce
	stepEnd time.Time     // the previous step's end
	warned  int           // the rank named last, until it stops being a straggler; -1
}

func newStragglers(f stragglerFlags, rank int, log *zap.Logger, m *trainingMetrics) *stragglers {
	return &stragglers{f: f, rank: rank, log: log, m: m, warned: -1,
		last: make([]int, max(f.stragglerWindow, 1)), lateBy: make([]time.Duration, max(f.stragglerWindow, 1))}
}

// pause is the test-only slowing of this rank (testSlowEnv).
func (s *stragglers) pause() {
	if s.f.testSlow.rank == s.rank && s.f.testSlow.d > 0 {
		time.Sleep(s.f.testSlow.d)
	}
}

// words returns size slots for the stop check's allreduce: this rank's
// wait in collectives during the step, in microseconds, in its own slot.
func (s *stragglers) words(comm time.Duration, size int) []int64 {
	w := make([]int64, size)
	w[s.rank] = (comm + s.check).Microseconds()
	return w
}

// observe takes every rank's wait (words after the MAX allreduce), and
// how long that allreduce took.
func (s *stragglers) observe(waits []int64, check time.Duration, now time.Time) {
	s.check = check
	prev := s.stepEnd
	s.stepEnd = now
	if prev.IsZero() || len(waits) < 2 {
		return
	}
	step := now.Sub(prev)
	last, late, skew := arrival(waits)
	if s.m != nil {
		s.m.skew.Observe(skew.Seconds())
	}
	s.last[s.next], s.lateBy[s.next] = -1, late
	if late > time.Duration(s.f.stragglerMargin*float64(step)) {
		s.last[s.next] = last
		if s.m != nil {
			s.m.last.WithLabelValues(strconv.Itoa(last)).Inc()
		}
	}
	s.next = (s.next + 1) % len(s.last)
	s.steps++
	s.judge(last, step)
}

// arrival returns the rank that arrived last (the least wait; the lowest
// rank on a tie), by how much (the next-least wait minus its own), and
// the skew (the largest wait minus the least).
func arrival(waits []int64) (last int, late, skew time.Duration) {
	lo, next, hi := int64(-1), int64(-1), int64(0)
	for r, w := range waits {
		switch {
		case lo < 0 || w < lo:
			lo, next, last = w, lo, r
		case next < 0 || w < next:
			next = w
		}
		hi = max(hi, w)
	}
	return last, time.Duration(next-lo) * time.Microsecond, time.Duration(hi-lo) * time.Microsecond
}

// judge warns, on rank 0, when rank r has been last by the margin in
// more than the share of a full window.
func (s *stragglers) judge(r int, step time.Duration) {
	if s.f.stragglerWindow == 0 || s.steps < s.f.stragglerWindow {
		return
	}
	n, sum := 0, time.Duration(0)
	for i, l := range s.last {
		if l == r {
			n, sum = n+1, sum+s.lateBy[i]
		}
	}
	persistent := float64(n) > s.f.stragglerShare*float64(len(s.last))
	switch {
	case persistent && s.warned != r:
		s.warned = r
		if s.rank == 0 {
			late := sum / time.Duration(n)
			s.log.Warn(fmt.Sprintf("straggler: rank %d arrived last at the collectives in %d of the last %d steps, by %v on "+
				"average (%.0f%% of the step); the other ranks wait for it",
				r, n, len(s.last), late.Round(time.Microsecond), 100*late.Seconds()/step.Seconds()),
				zap.Int("straggler_rank", r), zap.Int("last_steps", n), zap.Int("window", len(s.last)),
				zap.Duration("late_by", late))
		}
	case !persistent && s.warned == r:
		s.warned = -1
	}
}
