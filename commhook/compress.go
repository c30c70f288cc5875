package commhook

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Compress returns a hook that runs inner on a copy of each bucket
// converted to dtype, then converts inner's result back into the bucket:
// torch's fp16_compress_wrapper (pg.Float16) and bf16_compress_wrapper
// (pg.BFloat16). Around a hook that allreduces its buffer, it halves the
// bytes sent; around PowerSGD, it halves P and Q. A bucket that already
// has dtype goes to inner as it is.
//
// The conversions round to nearest even (see backend.Convert: float64 goes
// through float32, as torch's .to does). inner sees the same Index,
// Params and IsLast; only Buffer is the compressed copy.
//
// If inner is Stateful, so is the wrapper: its state is inner's.
func Compress(dtype pg.Dtype, inner Hook) Hook {
	return &compressed{dtype: dtype, inner: inner,
		name: fmt.Sprintf("%s_compress_wrapper(%s)", shortName(dtype), Name(inner))}
}

type compressed struct {
	dtype pg.Dtype
	inner Hook
	name  string
}

// Name is "fp16_compress", "bf16_compress", or
// "fp16_compress_wrapper(<inner's name>)" and so on.
func (c *compressed) Name() string { return c.name }

// Run converts, runs inner on the copy, and converts the result back once
// inner's Work is done.
func (c *compressed) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	if b.Buffer.Dtype == c.dtype {
		return c.inner.Run(ctx, g, b)
	}
	small := pg.NewTensor(c.dtype, b.Buffer.Len())
	if err := backend.Convert(small, b.Buffer); err != nil {
		return pg.Completed(fmt.Errorf("commhook: %s: %w", c.name, err))
	}
	w := c.inner.Run(ctx, g, &GradBucket{Index: b.Index, Buffer: small, Params: b.Params, IsLast: b.IsLast})
	if w == nil {
		return pg.Completed(fmt.Errorf("commhook: %s: the inner hook returned no Work for bucket %d", c.name, b.Index))
	}
	if w.Err() != nil || isDone(w) {
		return pg.Completed(decompress(w.Err(), b.Buffer, small))
	}
	f := pg.NewFuture()
	go func() { f.Complete(decompress(w.Wait(ctx), b.Buffer, small)) }()
	return f
}

// decompress copies the result back into the bucket if inner succeeded.
func decompress(err error, dst, src pg.Tensor) error {
	if err != nil {
		return err
	}
	return backend.Convert(dst, src)
}

func isDone(w pg.Work) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

// State is inner's state, if inner is Stateful; nil otherwise.
func (c *compressed) State() map[string][]float64 {
	if s, ok := c.inner.(Stateful); ok {
		return s.State()
	}
	return nil
}

// LoadState loads inner's state. A wrapper around a stateless hook
// accepts only an empty state.
func (c *compressed) LoadState(st map[string][]float64) error {
	if s, ok := c.inner.(Stateful); ok {
		return s.LoadState(st)
	}
	if len(st) > 0 {
		return fmt.Errorf("commhook: %s keeps no state, but was given %d entries", c.name, len(st))
	}
	return nil
}

func shortName(d pg.Dtype) string {
	switch d {
	case pg.Float16:
		return "fp16"
	case pg.BFloat16:
		return "bf16"
	case pg.Float32:
		return "fp32"
	case pg.Float64:
		return "fp64"
	}
	return d.String()
}
