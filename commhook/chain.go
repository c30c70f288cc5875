package commhook

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// core is what PowerSGD and BatchedPowerSGD share: the options, the
// state, the issue order, plain allreduce before the start iteration, and
// the goroutine that runs a compressed bucket's steps.
type core struct {
	name string
	opts PowerSGDOptions
	seq  sequence

	mu sync.Mutex // guards st
	st powerState
}

// job is one bucket's compressed communication: prepare runs before the
// bucket's turn, issue while it holds it (returning the step that
// finishes after the turn has passed on).
type job interface {
	prepare() error
	issue(ctx context.Context) (finish func(context.Context) error, err error)
}

// run is Run for both hooks: plain allreduce before StartIter, else the
// job that plan builds (under the state lock) for bucket b.
func (c *core) run(ctx context.Context, g pg.ProcessGroup, b *GradBucket, plan func() (job, error)) pg.Work {
	c.mu.Lock()
	plain := c.st.iter < c.opts.StartIter
	var j job
	var err error
	if plain {
		if b.IsLast { // torch's maybe_increase_iter, at once on this path
			c.st.iter++
		}
	} else {
		j, err = plan()
	}
	c.mu.Unlock()
	prev, mine := c.seq.take()
	if err != nil {
		mine.pass(err)
		return pg.Completed(err)
	}
	if plain {
		return c.allreduce(ctx, g, b, prev, mine)
	}
	f := pg.NewFuture()
	go func() { f.Complete(c.chain(ctx, j, b.IsLast, prev, mine)) }()
	return f
}

// allreduce is Allreduce, issued in its turn: at once when the previous
// bucket has issued everything (always, unless a compressed bucket of the
// same iteration is still in flight).
func (c *core) allreduce(ctx context.Context, g pg.ProcessGroup, b *GradBucket, prev, mine *turn) pg.Work {
	if prev.ready() && prev.wait(ctx) == nil {
		defer mine.pass(nil)
		return allreduceBySize(ctx, g, b)
	}
	f := pg.NewFuture()
	go func() {
		if err := prev.wait(ctx); err != nil {
			mine.pass(err)
			f.Complete(err)
			return
		}
		w := allreduceBySize(ctx, g, b)
		mine.pass(nil)
		f.Complete(w.Wait(ctx))
	}()
	return f
}

// chain runs j: prepare, wait for the turn, issue, pass the turn on,
// finish. The last bucket then counts the iteration, as torch's
// decompress does. A panic fails the bucket instead of the process.
func (c *core) chain(ctx context.Context, j job, last bool, prev, mine *turn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("commhook: %s panicked: %v\n%s", c.name, p, debug.Stack())
		}
		mine.pass(err) // no-op once passed on success
	}()
	if err := j.prepare(); err != nil {
		return err
	}
	if err := prev.wait(ctx); err != nil {
		return err
	}
	finish, err := j.issue(ctx)
	if err != nil {
		return err
	}
	mine.pass(nil)
	if err := finish(ctx); err != nil {
		return err
	}
	if last {
		c.mu.Lock()
		c.st.iter++
		c.mu.Unlock()
	}
	return nil
}

// vec is a vector of the compute type T that travels in dtype wire: the
// bucket's own dtype, so that P, Q and the uncompressed tensors of a
// float16 bucket are sent as float16.
type vec[T float] struct {
	data []T
	wire pg.Dtype
	sent pg.Tensor
}

// allreduce starts a SUM allreduce of v; an empty v sends nothing (every
// rank has the same layout, so every rank skips it).
func (v *vec[T]) allreduce(ctx context.Context, g pg.ProcessGroup) pg.Work {
	if len(v.data) == 0 {
		return pg.Completed(nil)
	}
	v.sent = tensorOf(v.data)
	if v.sent.Dtype != v.wire {
		t := pg.NewTensor(v.wire, len(v.data))
		if err := backend.Convert(t, v.sent); err != nil {
			return pg.Completed(err)
		}
		v.sent = t
	}
	return g.AllReduce(ctx, v.sent, pg.Op(pg.Sum))
}

// wait waits for w and copies the sum back into v.data.
func (v *vec[T]) wait(ctx context.Context, w pg.Work, what string) error {
	if err := w.Wait(ctx); err != nil {
		return fmt.Errorf("commhook: allreduce of %s: %w", what, err)
	}
	if len(v.data) == 0 {
		return nil
	}
	return backend.Convert(tensorOf(v.data), v.sent)
}

func tensorOf[T float](s []T) pg.Tensor {
	switch s := any(s).(type) {
	case []float32:
		return pg.Float32s(s)
	case []float64:
		return pg.Float64s(s)
	}
	panic("unreachable")
}

// scale divides every element by n.
func scale[T float](s []T, n int) {
	d := T(n)
	for i := range s {
		s[i] /= d
	}
}
