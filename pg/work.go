package pg

import (
	"context"
	"sync"
)

// Work is the handle of an asynchronous collective, like c10d's Work.
// Done is closed when the collective has finished; Err is then its result.
// Wait blocks until it finishes or ctx ends. Cancelling ctx in Wait stops
// the wait, not the collective: use the group's Abort for that.
type Work interface {
	Wait(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

// Future is the Work that backends return. The backend calls Complete
// exactly once; later calls are ignored.
type Future struct {
	done chan struct{}
	once sync.Once
	err  error
}

// NewFuture returns an unfinished Future.
func NewFuture() *Future { return &Future{done: make(chan struct{})} }

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
// collective's error or ctx's.
func (f *Future) Wait(ctx context.Context) error {
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
