package pg

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Work is the handle of an asynchronous collective, like c10d's Work.
// Done is closed when the collective has finished; Err is then its result.
// Wait blocks until it finishes or ctx ends. Cancelling ctx in Wait stops
// the wait, not the collective: use the group's Abort for that.
//
// Seq is the collective's sequence number in its group, as c10d's
// getSequencenumberForGroup: the first collective a group issues is 1,
// the next 2, and so on, the same on every rank. Send and Recv are
// numbered apart, per peer and direction (the first Send to a peer is 1).
// A Work that is not one collective (arguments refused before issue, or a
// comm hook's composite) has Seq 0.
type Work interface {
	Wait(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
	Seq() uint64
}

// Future is the Work that backends return. The backend calls Complete
// exactly once; later calls are ignored.
type Future struct {
	done  chan struct{}
	once  sync.Once
	err   error
	seq   uint64
	times *OpTimes // set by CompleteAt, before done is closed; a pointer keeps untimed Futures small
}

// NewFuture returns an unfinished Future with sequence number 0.
func NewFuture() *Future { return &Future{done: make(chan struct{})} }

// NewSeqFuture returns an unfinished Future for collective number seq.
func NewSeqFuture(seq uint64) *Future { return &Future{done: make(chan struct{}), seq: seq} }

// Seq is the collective's sequence number, or 0.
func (f *Future) Seq() uint64 { return f.seq }

// Completed returns a Future that has already finished with err.
func Completed(err error) *Future {
	f := NewFuture()
	f.Complete(err)
	return f
}

// Complete finishes the Future with err (nil for success).
func (f *Future) Complete(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

// CompleteAt finishes the Future with err, as Complete, and with the
// times at which the backend saw the collective run (see [TimedWork]).
func (f *Future) CompleteAt(err error, t OpTimes) {
	f.once.Do(func() {
		f.err, f.times = err, &t
		close(f.done)
	})
}

// Times is what CompleteAt was given: the zero OpTimes until Done is
// closed, or if the Future was finished by Complete.
func (f *Future) Times() OpTimes {
	select {
	case <-f.done:
		if f.times != nil {
			return *f.times
		}
	default:
	}
	return OpTimes{}
}

// OpTimes is when a backend saw a collective run, from its own
// knowledge of the device (pg/nccl's watchdog, from CUDA events) rather
// than from when someone polling its Work noticed it finished. A zero
// field is unknown.
type OpTimes struct {
	// Started is when the backend found the collective started on the
	// device, Completed when it found it completed (zero if it failed).
	Started, Completed time.Time
	// Duration is the collective's time on the device, measured between
	// a start and an end event (cudaEventElapsedTime); 0 when not
	// measured.
	Duration time.Duration
}

// TimedWork is a Work whose backend knows when it ran (an optional
// ability; *Future has it, and backends that record times finish their
// Futures with CompleteAt). Times is valid once Done is closed. pg/flight
// fills its dumps' started and completed times and duration_ms from it.
type TimedWork interface {
	Work
	Times() OpTimes
}

var _ TimedWork = (*Future)(nil)

// TimesOf is w's times if it is a TimedWork, else the zero OpTimes. A
// wrapper whose Work stands for another's forwards them with it, so that
// the backend's times reach what is over the wrapper (pg/flight).
func TimesOf(w Work) OpTimes {
	if tw, ok := w.(TimedWork); ok {
		return tw.Times()
	}
	return OpTimes{}
}

// Done is closed once the collective has finished.
func (f *Future) Done() <-chan struct{} { return f.done }

// Err returns the result, or nil while the collective is still running.
func (f *Future) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Wait blocks until the collective finishes or ctx ends, and returns the
// collective's error or ctx's. A nil ctx is refused as an ended one is:
// the result if the collective has finished, otherwise an error wrapping
// ErrInvalidArgument while the collective still owns its buffers.
func (f *Future) Wait(ctx context.Context) error {
	if ctx == nil {
		select {
		case <-f.done:
			return f.err
		default:
			return errNilContext()
		}
	}
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		select {
		case <-f.done:
			return f.err
		default:
		}
		return context.Cause(ctx)
	}
}

// WaitAll waits for every Work and returns the first error in order.
func WaitAll(ctx context.Context, works ...Work) error {
	var first error
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// errNilContext is the error of a call given a nil ctx. pg/backend's
// CheckContext returns the same text (its tests hold the two together);
// pg cannot call it, since pg/backend imports pg.
func errNilContext() error {
	return fmt.Errorf("%w: nil context.Context; pass context.Background() or one with a deadline", ErrInvalidArgument)
}
