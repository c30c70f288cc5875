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
	names   string // the missing ranks, as world.names says
	waited  time.Duration
}

func (f timeoutFailure) errFor(v view) error {
	if !v.arrived {
		return v.collErr(pg.ErrRemote, f.by, fmt.Errorf("rank %d timed out after %v waiting for %s", f.by, f.waited, f.names))
	}
	if v.op == opMonitoredBarrier {
		missing := f.missing
		if !v.waitAll {
			missing = missing[:1]
		}
		return &pg.MissingRanksError{Rank: v.rank, Missing: slices.Clone(missing), Timeout: f.waited.String()}
	}
	return v.collErr(pg.ErrTimeout, f.missing[0], fmt.Errorf("%s did not arrive within %v", f.names, f.waited))
}

// cancelFailure: rank by's ctx ended while missing had not arrived.
type cancelFailure struct {
	by      int
	missing []int
	names   string
	cause   error
}

func (f cancelFailure) errFor(v view) error {
	if v.rank == f.by {
		return v.collErr(pg.ErrTimeout, f.missing[0], fmt.Errorf("%w (%s had not arrived)", f.cause, f.names))
	}
	return v.collErr(pg.ErrRemote, f.by,
		fmt.Errorf("rank %d gave up (%v) while %s had not arrived", f.by, f.cause, f.names))
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
	return v.collErr(pg.ErrMismatch, peer,
		fmt.Errorf("collective #%d: rank %d issued %v but rank %d issued %v", f.seq, f.a, f.da, f.b, f.db))
}

// detailFailure: ranks a and b issued the same kind of collective as
// number seq but disagree on what desc does not hold (split sizes, tensor
// lists, new_group's ranks).
type detailFailure struct {
	seq  uint64
	a, b int
	kind opKind
	msg  string
}

func (f detailFailure) errFor(v view) error {
	peer := f.b
	if v.rank == f.b {
		peer = f.a
	}
	err := fmt.Errorf("collective #%d: %s", f.seq, f.msg)
	if f.kind == opAllToAll {
		// Split sizes that do not pair up are a wrong call as much as a
		// disagreement.
		err = fmt.Errorf("%w: collective #%d: %s", pg.ErrInvalidArgument, f.seq, f.msg)
	}
	return v.collErr(pg.ErrMismatch, peer, err)
}

// leaveReason is how a rank that closed or aborted is named to its peers;
// name is world.name's.
func leaveReason(name string, kind, cause error) string {
	msg := fmt.Sprintf("%s left the group (%v)", name, kind)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return msg
}
