package reducer

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// MixedPrecision is torch DDP's mixed_precision (_MixedPrecision): the
// model keeps float32 (or float64) master parameters, computes with
// ParamDtype copies, so its gradients come in ParamDtype, and DDP reduces
// them in ReduceDtype and hands back gradients of the master parameters'
// dtype.
//
// As in torch: buckets hold ParamDtype, and MarkReady takes ParamDtype
// gradients. Each bucket is cast to ReduceDtype (when it differs),
// allreduced with SUM, divided by the world size in ReduceDtype, and the
// result is cast once to each parameter's own dtype (Param.Dtype): that
// is what Gradient(i) returns after Finalize, the gradient an optimizer
// steps the master parameter with. The gradient given to MarkReady is
// left holding this rank's own (with GradientAsBucketView and ReduceDtype
// equal to ParamDtype, it is the bucket, so it holds the reduced result in
// ParamDtype).
//
// torch's third field, buffer_dtype, casts module buffers; the reducer
// has no buffers, so it has no counterpart here. Casting the parameters to
// ParamDtype for the forward pass is the engine's job, as in torch, where
// DDP's forward pre-hooks do it.
type MixedPrecision struct {
	// ParamDtype is the dtype of the gradients (and of the parameters'
	// compute copies): pg.Float16, pg.BFloat16, pg.Float32 or pg.Float64.
	ParamDtype pg.Dtype
	// ReduceDtype is the dtype the buckets are communicated and averaged
	// in. 0 means ParamDtype.
	ReduceDtype pg.Dtype
}

func (m *MixedPrecision) check() error {
	if !m.ParamDtype.IsFloat() {
		return fmt.Errorf("reducer: MixedPrecision.ParamDtype is %v; use a floating-point dtype (pg.Float16, pg.BFloat16, "+
			"pg.Float32 or pg.Float64)", m.ParamDtype)
	}
	if m.ReduceDtype != 0 && !m.ReduceDtype.IsFloat() {
		return fmt.Errorf("reducer: MixedPrecision.ReduceDtype is %v; use a floating-point dtype, or 0 for ParamDtype",
			m.ReduceDtype)
	}
	return nil
}

func (m *MixedPrecision) reduceDtype() pg.Dtype {
	if m.ReduceDtype == 0 {
		return m.ParamDtype
	}
	return m.ReduceDtype
}

// mixedTransport is the host path of MixedPrecision (Note [bucket
// transports]): the upcast hook's results in ReduceDtype, and the
// gradients in the parameters' dtypes.
type mixedTransport struct {
	hostTransport
	hook   *upcastHook
	master []pg.Tensor // per parameter, Param.Dtype: what Gradient returns
}

// newMixedTransport installs the upcast hook as the reducer's.
func newMixedTransport(r *Reducer) *mixedTransport {
	mp := r.opts.MixedPrecision // checked by withDefaults
	t := &mixedTransport{hostTransport: hostTransport{r}, hook: &upcastHook{reduce: mp.reduceDtype()},
		master: make([]pg.Tensor, len(r.params))}
	for i, p := range r.params {
		t.master[i] = pg.NewTensor(p.Dtype, r.numel[i])
	}
	r.hook = t.hook
	return t
}

func (t *mixedTransport) result(i int) pg.Tensor { return t.master[i] }

// upcastHook is torch's _reducer_allreduce_and_upcast_hook: cast the
// bucket to the reduce dtype, SUM-allreduce it, divide by the world size.
// The result stays in the reduce dtype, in the bucket itself when the
// dtypes agree, for writeBack to cast into each parameter's dtype.
type upcastHook struct {
	reduce  pg.Dtype
	results []pg.Tensor // per bucket: the reduce-dtype result when it is not the bucket
}

func (h *upcastHook) Name() string { return "mixed_precision_allreduce_and_upcast" }

func (h *upcastHook) Run(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	buf := b.Buffer
	if h.reduce != buf.Dtype {
		for len(h.results) <= b.Index {
			h.results = append(h.results, pg.Tensor{})
		}
		if h.results[b.Index].Dtype != h.reduce || h.results[b.Index].Len() != buf.Len() {
			h.results[b.Index] = pg.NewTensor(h.reduce, buf.Len())
		}
		buf = h.results[b.Index]
		if err := backend.Convert(buf, b.Buffer); err != nil {
			return pg.Completed(fmt.Errorf("reducer: mixed precision: %w", err))
		}
	}
	w := g.AllReduce(ctx, buf, pg.Op(pg.Sum))
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		if err == nil {
			err = commhook.Divide(buf, g.Size())
		}
		f.Complete(err)
	}()
	return f
}

// result is parameter i's reduced gradient in the reduce dtype.
func (h *upcastHook) result(l *layout, i int) pg.Tensor {
	b := l.bucketOf[i]
	if b < len(h.results) && h.results[b].Data != nil && h.results[b].Dtype == h.reduce {
		bk := l.buckets[b]
		off := bk.Offsets[l.slotOf[i]]
		return h.results[b].Slice(off, off+bk.Lengths[l.slotOf[i]])
	}
	return l.view(i)
}

// writeBack casts each result into its parameter's dtype (Gradient)
// and, where MarkReady's gradient is not the bucket itself, leaves that
// gradient as it was: torch replaces p.grad by the upcast gradient.
// Parameters unused on every rank keep their gradient untouched.
func (t *mixedTransport) writeBack(_ context.Context, globalUsed []int32) error {
	r := t.r
	for i := range r.params {
		if globalUsed != nil && globalUsed[i] == 0 {
			continue
		}
		src := t.hook.result(r.layout, i)
		_ = backend.Convert(t.master[i], src) // float to float of one length: cannot fail
		r.copies.out.Add(int64(len(t.master[i].Data)))
	}
	return nil
}
