package local

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goddp/ddp/pg"
)

// failure is why a slot broke. Each rank turns it into its own error.
type failure interface {
	errFor(v view) error
}

// view is one rank's position when it learns that a slot broke.
type view struct {
	op      opKind
	rank    int
	arrived bool // the rank was in the slot before it broke
	waitAll bool // MonitoredBarrier's waitAll
}

func (v view) collErr(kind error, peer int, err error) error {
	return &pg.CollectiveError{Op: v.op.String(), Rank: v.rank, Peer: peer, Kind: kind, Err: err}
}

// timeoutFailure: rank by waited its group timeout (or MonitoredBarrier's
// timeout) and missing had still not arrived.
type timeoutFailure struct {
	by      int
	missing []int
	waited  time.Duration
}

func (f timeoutFailure) errFor(v view) error {
	if !v.arrived {
		return v.collErr(pg.ErrRemote, f.by, fmt.Errorf("rank %d timed out after %v waiting for ranks %v", f.by, f.waited, f.missing))
	}
	if v.op == opMonitoredBarrier {
		missing := f.missing
		if !v.waitAll {
			missing = missing[:1]
		}
		return &pg.MissingRanksError{Rank: v.rank, Missing: slices.Clone(missing), Timeout: f.waited.String()}
	}
	return v.collErr(pg.ErrTimeout, f.missing[0], fmt.Errorf("ranks %v did not arrive within %v", f.missing, f.waited))
}

// cancelFailure: rank by's ctx ended while missing had not arrived.
type cancelFailure struct {
	by      int
	missing []int
	cause   error
}

func (f cancelFailure) errFor(v view) error {
	if v.rank == f.by {
		return v.collErr(pg.ErrTimeout, f.missing[0], fmt.Errorf("%w (ranks %v had not arrived)", f.cause, f.missing))
	}
	return v.collErr(pg.ErrRemote, f.by, fmt.Errorf("rank %d gave up (%v) while ranks %v had not arrived", f.by, f.cause, f.missing))
}

// goneFailure: rank peer closed or aborted its group.
type goneFailure struct {
	peer   int
	reason string
}

func (f goneFailure) errFor(v view) error {
	return v.collErr(pg.ErrRemote, f.peer, errors.New(f.reason))
}

// mismatchFailure: ranks a and b issued different collectives as number seq.
type mismatchFailure struct {
	seq    uint64
	a, b   int
	da, db desc
}

func (f mismatchFailure) errFor(v view) error {
	peer := f.b
	if v.rank == f.b {
		peer = f.a
	}
	return v.collErr(pg.ErrMismatch, peer, fmt.Errorf("collective #%d: rank %d issued %v but rank %d issued %v", f.seq, f.a, f.da, f.b, f.db))
}

// leaveReason is how a rank that closed or aborted is named to its peers.
func leaveReason(r int, kind, cause error) string {
	msg := fmt.Sprintf("rank %d left the group (%v)", r, kind)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return msg
}
