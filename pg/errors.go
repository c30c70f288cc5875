package pg

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error a process group returns wraps one of them,
// so callers can branch with errors.Is. They mirror c10d's error types:
// ErrTimeout is TIMEOUT, ErrComm is COMM_ERROR and ErrRemote is REMOTE_ERROR.
var (
	// ErrTimeout: the collective did not finish within the group timeout
	// or the caller's context deadline.
	ErrTimeout = errors.New("timeout")
	// ErrComm: the link to a peer failed (connection reset, EOF, bad frame).
	ErrComm = errors.New("communication error")
	// ErrRemote: a peer reported that it failed or is shutting down.
	ErrRemote = errors.New("remote error")
	// ErrAborted: Abort was called on this group.
	ErrAborted = errors.New("process group aborted")
	// ErrClosed: the group was closed.
	ErrClosed = errors.New("process group closed")
	// ErrInvalidArgument: the call itself was wrong (dtype, length, root, op).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnauthenticated: a peer failed the shared-secret handshake.
	ErrUnauthenticated = errors.New("unauthenticated peer")
	// ErrMismatch: ranks issued different collectives at the same position
	// (a desynchronisation), or disagree on sizes or dtypes.
	ErrMismatch = errors.New("collective mismatch across ranks")
	// ErrForeignListener: an address a rank dialed (the store's, a peer's)
	// accepted the connection but did not answer goddp's handshake, so
	// another program listens there. Errors wrapping it wrap
	// ErrUnauthenticated too; they are not retried.
	ErrForeignListener = errors.New("something else is listening there")
)

// NoPeer is the Peer of a CollectiveError that involves no particular peer.
const NoPeer = -1

// CollectiveError describes a failed collective: which operation, on which
// rank, and which peer it was talking to. Kind is one of the sentinels above
// and Err the underlying cause; errors.Is matches both.
type CollectiveError struct {
	Op   string // "allreduce", "broadcast", "connect", ...
	Rank int    // this rank
	Peer int    // the peer involved, or NoPeer
	Kind error  // ErrTimeout, ErrComm, ErrRemote, ...
	Err  error  // the cause; may be nil
}

func (e *CollectiveError) Error() string {
	msg := fmt.Sprintf("pg: %s on rank %d", e.Op, e.Rank)
	if e.Peer != NoPeer {
		msg += fmt.Sprintf(" with peer rank %d", e.Peer)
	}
	msg += ": " + e.Kind.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Kind and Err, so errors.Is and errors.As see both.
func (e *CollectiveError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// MissingRanksError is returned by MonitoredBarrier when ranks did not
// arrive in time. It wraps ErrTimeout.
type MissingRanksError struct {
	Rank    int   // the rank reporting
	Missing []int // ranks that did not arrive, ascending
	Timeout string
}

func (e *MissingRanksError) Error() string {
	return fmt.Sprintf("pg: monitored barrier on rank %d: ranks %v failed to pass monitoredBarrier in %s; check that "+
		"they are alive and issue the same collectives", e.Rank, e.Missing, e.Timeout)
}

// Unwrap makes errors.Is(err, ErrTimeout) true.
func (e *MissingRanksError) Unwrap() error { return ErrTimeout }
