package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
)

// tailWithVerdict is a survivor's stderr tail: its report line, then the
// verdict writeVerdict prints for se.
func tailWithVerdict(t *testing.T, se *pg.StallError) string {
	t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "ddp-train: rank %d: step 9: %v\n", se.Rank, se)
	writeVerdict(&b, fmt.Errorf("step 9: %w", se))
	return b.String()
}

// The launcher's line names the rank the survivors' verdicts agree on,
// first, with what happened to it: Note [the headline names the culprit].
func TestCulpritHeadlineFromVerdicts(t *testing.T) {
	stall := func(reporter int, f func(*pg.StallError)) launch.Failure {
		se := &pg.StallError{Rank: reporter, Op: pg.OpAllReduce, Seq: 57, StoreHost: pg.NoPeer, Kind: pg.ErrTimeout,
			Err: pg.ErrTimeout}
		f(se)
		return launch.Failure{Rank: reporter, Err: errors.New("exit status 4"), Tail: tailWithVerdict(t, se)}
	}
	silent2 := func(se *pg.StallError) { se.Silent = []int{2} }
	probed2 := func(reach pg.Reach) func(*pg.StallError) { // rank 2 silent, and what a probe found of it
		return func(se *pg.StallError) {
			se.Silent, se.Progress = []int{2}, make([]pg.RankProgress, 3)
			for r := range se.Progress {
				se.Progress[r].Rank = r
			}
			se.Progress[2].Reach, se.Progress[2].Addr = reach, "10.98.0.2:41000"
			if reach == pg.ReachNoHost {
				se.Unreachable = []int{2}
			}
		}
	}
	for _, c := range []struct {
		name string
		we   launch.WorkerError
		want string
	}{
		{"stopped", launch.WorkerError{Failures: []launch.Failure{stall(1, silent2), stall(0, silent2)}, Frozen: []int{2}},
			"rank 2 stopped responding (SIGSTOP: found stopped, and killed) at allreduce #57; ranks 0, 1 timed out waiting " +
				"for it"},
		{"hung", launch.WorkerError{Failures: []launch.Failure{stall(0, silent2)}},
			"rank 2 stopped responding (hung, or stopped) at allreduce #57; rank 0 timed out waiting for it"},
		{"behind", launch.WorkerError{Failures: []launch.Failure{stall(0, func(se *pg.StallError) { se.Behind = []int{1} })}},
			"rank 1 fell behind (it never entered the collective) at allreduce #57; rank 0 timed out waiting for it"},
		{"the store's host",
			launch.WorkerError{Failures: []launch.Failure{stall(1,
				func(se *pg.StallError) { se.StoreErr, se.StoreHost = pg.ErrTimeout, 0 })}, Frozen: []int{0}},
			"rank 0 (the store's host) stopped responding (SIGSTOP: found stopped, and killed) at allreduce #57; rank 1 timed " +
				"out waiting for it"},
		{"the majority",
			launch.WorkerError{Failures: []launch.Failure{stall(0, func(se *pg.StallError) { se.Silent = []int{1} }),
				stall(1, silent2), stall(3, silent2)}},
			"rank 2 stopped responding (hung, or stopped) at allreduce #57; ranks 1, 3 timed out waiting for it"},
		{"unreachable",
			launch.WorkerError{Failures: []launch.Failure{stall(0, probed2(pg.ReachNoHost)), stall(1, probed2(pg.ReachNoHost))}},
			"rank 2 became unreachable (its host does not answer: the network to it is down or partitioned) at allreduce #57; " +
				"ranks 0, 1 lost it"},
		{"gone", launch.WorkerError{Failures: []launch.Failure{stall(0, probed2(pg.ReachRefused))}},
			"rank 2 is gone (its host refused the connection) at allreduce #57; rank 0 lost it"},
		{"unresponsive", launch.WorkerError{Failures: []launch.Failure{stall(0, probed2(pg.ReachAnswers))}},
			"rank 2 stopped responding (its host answers, but the process does not: stopped or busy) at allreduce #57; rank 0 " +
				"timed out waiting for it"},
		{"unresponsive, found stopped",
			launch.WorkerError{Failures: []launch.Failure{stall(0, probed2(pg.ReachAnswers))}, Frozen: []int{2}},
			"rank 2 stopped responding (SIGSTOP: found stopped, and killed) at allreduce #57; rank 0 timed out waiting for it"},
		{"no verdict", launch.WorkerError{Failures: []launch.Failure{{Rank: 1, Err: errors.New(
			"exit status 4"), Tail: "ddp-train: rank 1: boom"}}}, ""},
	} {
		if got := culpritHeadline(&c.we); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// A subgroup's stall, or one without a culprit, leaves no verdict: the
// launcher then falls back to the failed worker's own line.
func TestNoVerdictWithoutCulprit(t *testing.T) {
	for _, err := range []error{
		errors.New("boom"),
		&pg.StallError{Rank: 0, Op: pg.OpAllReduce, Seq: 3, StoreHost: pg.NoPeer},
		&pg.StallError{Rank: 0, Op: pg.OpAllReduce, Seq: 3, Silent: []int{1}, StoreHost: pg.NoPeer, Group: "intra"},
	} {
		var b bytes.Buffer
		writeVerdict(&b, err)
		if b.Len() != 0 {
			t.Errorf("writeVerdict(%v) = %q", err, b.String())
		}
	}
}
