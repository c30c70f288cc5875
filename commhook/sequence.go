package commhook

import (
	"context"
	"fmt"
	"sync"
)

// Note [issue order across buckets]: every rank must issue the same
// collectives in the same order. The reducer calls hooks in bucket order,
// so a hook that issues all its collectives inside Run is in order by
// construction. PowerSGD cannot: it allreduces P, waits for the sum,
// orthogonalizes it, and only then can it allreduce Q. Those later
// collectives are issued from a goroutine, and two buckets' goroutines
// would race: rank 0 could send bucket 1's P while rank 1 sends bucket
// 0's Q, two collectives of different sizes meeting at the same position
// (PyTorch's PowerSGD hook crashes gloo this way).
//
// A sequence hands out turns in Run order, which is bucket order and the
// same on every rank. A bucket's chain may issue collectives only while
// it holds its turn, that is, once the previous bucket's chain has issued
// its last one; it then passes the turn on and waits for its results
// without it. Work that needs no communication (error feedback, P = M·Q)
// is done before the turn comes, so it overlaps the previous bucket's
// communication. The order on the wire is therefore fixed: bucket 0's
// collectives, then bucket 1's, and so on, and the links never idle
// while a later bucket is ready, except during one orthogonalization.
//
// A chain that fails passes the turn on with its error, so the chains
// after it fail at once instead of issuing collectives out of step.

// sequence hands out turns in call order.
type sequence struct {
	mu   sync.Mutex
	last *turn
}

// turn is one chain's right to issue collectives. done closes when the
// chain has issued all of them (err nil) or has given up (err set).
type turn struct {
	done chan struct{}
	once sync.Once
	err  error
}

// take returns the turn to wait for (nil: none) and the caller's own.
func (s *sequence) take() (prev, mine *turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mine = &turn{done: make(chan struct{})}
	prev, s.last = s.last, mine
	return prev, mine
}

// ready reports whether t has been passed on, successfully or not.
func (t *turn) ready() bool {
	if t == nil {
		return true
	}
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// wait blocks until the previous chain t passes the turn on, or ctx ends.
func (t *turn) wait(ctx context.Context) error {
	if t == nil {
		return nil
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return fmt.Errorf("commhook: waiting for the previous bucket to issue its collectives: %w", context.Cause(ctx))
	}
	if t.err != nil {
		return fmt.Errorf("commhook: an earlier bucket's communication failed: %w", t.err)
	}
	return nil
}

// pass hands the turn on; err non-nil means this chain gave up.
func (t *turn) pass(err error) {
	t.once.Do(func() {
		t.err = err
		close(t.done)
	})
}
