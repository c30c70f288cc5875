package commhook

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// ErrInvalidConfig is wrapped by the errors of NewPowerSGD and
// NewBatchedPowerSGD about their options.
var ErrInvalidConfig = errors.New("commhook: invalid hook configuration")

// PowerSGDOptions configure PowerSGD and BatchedPowerSGD, with the
// meanings of torch's PowerSGDState. DefaultPowerSGDOptions gives its
// defaults; a zero PowerSGDOptions is not valid.
type PowerSGDOptions struct {
	// MatrixApproximationRank is r, the rank of the approximation P·Qᵀ:
	// the lower, the stronger the compression. torch: 1.
	MatrixApproximationRank int
	// StartIter: iterations before it use plain allreduce
	// (start_powerSGD_iter). torch: 1000.
	StartIter int
	// MinCompressionRate: an n×m tensor is compressed only when
	// (n+m)·r·MinCompressionRate < n·m. torch: 2.
	MinCompressionRate float64
	// UseErrorFeedback: each rank keeps the difference between what it
	// had and what the compressed average gave back, and adds it to its
	// next gradient. torch: on.
	UseErrorFeedback bool
	// WarmStart: start each iteration's power step from the last Q
	// instead of a fresh random one. torch: on.
	WarmStart bool
	// OrthogonalizationEpsilon is added to each column's norm when
	// orthogonalizing. torch: 0.
	OrthogonalizationEpsilon float64
	// RandomSeed seeds the random initial Q matrices. torch: 0.
	RandomSeed uint64
}

// DefaultPowerSGDOptions returns torch's defaults: rank 1, start at
// iteration 1000, minimum compression rate 2, error feedback and warm
// start on, epsilon 0, seed 0.
func DefaultPowerSGDOptions() PowerSGDOptions {
	return PowerSGDOptions{MatrixApproximationRank: 1, StartIter: 1000, MinCompressionRate: 2,
		UseErrorFeedback: true, WarmStart: true}
}

func (o PowerSGDOptions) validate() error {
	switch {
	case o.MatrixApproximationRank < 1:
		return fmt.Errorf("%w: MatrixApproximationRank %d; want at least 1", ErrInvalidConfig, o.MatrixApproximationRank)
	case o.StartIter < 0:
		return fmt.Errorf("%w: StartIter %d is negative", ErrInvalidConfig, o.StartIter)
	case !(o.MinCompressionRate >= 0) || math.IsInf(o.MinCompressionRate, 0):
		return fmt.Errorf("%w: MinCompressionRate %v; want a finite number ≥ 0", ErrInvalidConfig, o.MinCompressionRate)
	case !(o.OrthogonalizationEpsilon >= 0):
		return fmt.Errorf("%w: OrthogonalizationEpsilon %v; want ≥ 0", ErrInvalidConfig, o.OrthogonalizationEpsilon)
	case (o.UseErrorFeedback || o.WarmStart) && o.StartIter <= 1:
		// torch's ValueError, in Go's names.
		return fmt.Errorf("%w: expect StartIter (start_powerSGD_iter) > 1 if UseErrorFeedback or WarmStart is enabled, "+
			"because PowerSGD can only be applied after the first two iterations in DDP (got StartIter %d)", ErrInvalidConfig,
			o.StartIter)
	}
	return nil
}

// PowerSGD is torch's powerSGD_hook: layer-wise low-rank compression of
// gradients (Vogels et al., 2019). Before StartIter it is Allreduce.
// From then on, for each bucket:
//
//  1. With error feedback, add this rank's last error to the bucket.
//  2. View each gradient as an n×m matrix M (n is its first dimension).
//     Compress it when (n+m)·r·MinCompressionRate < n·m, r = min(n, m,
//     rank); the others, 1-D ones always, are allreduced together and
//     divided by the world size.
//  3. For each M: orthogonalize Q (m×r; random at first, or always
//     without warm start), P = M·Q.
//  4. Allreduce the Ps (not divided: they are orthogonalized next),
//     orthogonalize each P (Gram-Schmidt), Q = Mᵀ·P.
//  5. Allreduce the Qs and divide them by the world size. M ≈ P·Qᵀ.
//  6. With error feedback, keep error = (bucket before) − (bucket after).
//
// The iteration counts when the last bucket of an iteration finishes.
//
// State (the iteration, each parameter's error and Q) is kept per
// parameter, not per bucket as torch does, so it survives a change of
// bucket layout, such as the first iteration after a resume; it is
// saved and restored with State and LoadState. Random Qs come from a PCG
// seeded with (RandomSeed, iteration<<32 | parameter index), the same on
// every rank; torch's generator cannot be reproduced, so the random
// starts differ from torch's.
//
// The buckets' later collectives (P, Q) are issued from goroutines in
// bucket order (see Note [issue order across buckets]). One PowerSGD
// value serves one reducer, on one rank: it holds that rank's state.
//
// Float16 and bfloat16 buckets (under Compress) are computed in float32,
// sent in the bucket's dtype and rounded once at the end.
type PowerSGD struct{ c core }

// NewPowerSGD returns a PowerSGD hook, or an error wrapping
// ErrInvalidConfig.
func NewPowerSGD(o PowerSGDOptions) (*PowerSGD, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &PowerSGD{c: core{name: "powersgd", opts: o, st: newPowerState()}}, nil
}

// Name is "powersgd".
func (h *PowerSGD) Name() string { return h.c.name }

// Options returns the options h was made with.
func (h *PowerSGD) Options() PowerSGDOptions { return h.c.opts }

// Run communicates bucket b; see PowerSGD.
func (h *PowerSGD) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	return h.c.run(ctx, g, b, func() (job, error) {
		switch b.Buffer.Dtype {
		case pg.Float64:
			return newLayerJob[float64](&h.c, g, b)
		case pg.Float32, pg.Float16, pg.BFloat16:
			return newLayerJob[float32](&h.c, g, b)
		}
		return nil, fmt.Errorf("commhook: powersgd cannot compress a %v bucket", b.Buffer.Dtype)
	})
}

// layerJob is one bucket's layer-wise compression.
type layerJob[T float] struct {
	c       *core
	g       pg.ProcessGroup
	b       *GradBucket
	iter    int
	work    []T // the bucket's values (a float32 copy, for a half bucket)
	mats    []lowRank[T]
	plain   []int // positions in b.Params of the tensors sent uncompressed
	errs    [][]T // per position in b.Params; nil without error feedback
	addErr  []bool
	u, p, q vec[T] // the uncompressed tensors, the Ps, the Qs
}

// lowRank is one compressed tensor.
type lowRank[T float] struct {
	at      int // position in b.Params
	n, m, r int
	mat     []T // in work
	p, q    []T // in the job's p and q
	state   []T // the parameter's Q kept across iterations (nil: not kept)
	fresh   bool
	stream  uint64
}

// shapeOf views a parameter as torch's tensor.view(shape[0], -1).
func shapeOf(v ParamView) (n, m int) {
	if len(v.Shape) == 0 || v.Shape[0] <= 0 || v.Len%v.Shape[0] != 0 {
		return v.Len, 1
	}
	return v.Shape[0], v.Len / v.Shape[0]
}

// shouldCompress is torch's _should_compress, with the element counts
// before and after compression.
func shouldCompress(n, m, r int, minRate float64) (ok bool, before, after int) {
	before, after = n*m, (n+m)*r
	return float64(after)*minRate < float64(before), before, after
}

// newLayerJob plans bucket b under the state lock: which tensors are
// compressed, and their state.
func newLayerJob[T float](c *core, g pg.ProcessGroup, b *GradBucket) (*layerJob[T], error) {
	j := &layerJob[T]{c: c, g: g, b: b, iter: c.st.iter}
	j.work = viewAs[T](b.Buffer)
	wire := b.Buffer.Dtype
	j.u.wire, j.p.wire, j.q.wire = wire, wire, wire
	var np, nq, nu int
	for at, v := range b.Params {
		n, m := shapeOf(v)
		r := min(n, m, c.opts.MatrixApproximationRank)
		ok, before, after := shouldCompress(n, m, r, c.opts.MinCompressionRate)
		c.st.numelBefore += before
		if !ok {
			c.st.numelAfter += before
			j.plain = append(j.plain, at)
			nu += v.Len
			continue
		}
		c.st.numelAfter += after
		lr := lowRank[T]{at: at, n: n, m: m, r: r, stream: uint64(j.iter)<<32 | uint64(uint32(v.Index))}
		if c.opts.WarmStart {
			q, found, err := stateVec[T](c.st.qs, paramKey(v.Index), m*r)
			if err != nil {
				return nil, err
			}
			lr.state, lr.fresh = q, !found
		} else {
			lr.fresh = true
		}
		j.mats = append(j.mats, lr)
		np, nq = np+n*r, nq+m*r
	}
	if c.opts.UseErrorFeedback {
		j.errs, j.addErr = make([][]T, len(b.Params)), make([]bool, len(b.Params))
		for at, v := range b.Params {
			e, found, err := stateVec[T](c.st.errs, paramKey(v.Index), v.Len)
			if err != nil {
				return nil, err
			}
			j.errs[at], j.addErr[at] = e, found
		}
	}
	j.u.data, j.p.data, j.q.data = make([]T, nu), make([]T, np), make([]T, nq)
	return j, nil
}

// prepare is everything before the first collective: error feedback,
// the Qs, P = M·Q, and the uncompressed tensors packed together.
func (j *layerJob[T]) prepare() error {
	if j.work == nil { // a half bucket: compute in float32
		j.work = make([]T, j.b.Buffer.Len())
		if err := backend.Convert(tensorOf(j.work), j.b.Buffer); err != nil {
			return err
		}
	}
	for at, v := range j.b.Params {
		if j.errs != nil && j.addErr[at] {
			add(j.work[v.Offset:v.Offset+v.Len], j.errs[at])
		}
	}
	pi, qi, eps := 0, 0, j.c.opts.OrthogonalizationEpsilon
	for k := range j.mats {
		lr := &j.mats[k]
		v := j.b.Params[lr.at]
		lr.mat = j.work[v.Offset : v.Offset+v.Len]
		lr.p, lr.q = j.p.data[pi:pi+lr.n*lr.r], j.q.data[qi:qi+lr.m*lr.r]
		pi, qi = pi+lr.n*lr.r, qi+lr.m*lr.r
		if lr.fresh {
			fillNormal(lr.q, j.c.opts.RandomSeed, lr.stream)
		} else {
			copy(lr.q, lr.state)
		}
		orthogonalize(lr.q, lr.m, lr.r, eps)
		mulMQ(lr.p, lr.mat, lr.q, lr.n, lr.m, lr.r)
	}
	u := j.u.data[:0]
	for _, at := range j.plain {
		v := j.b.Params[at]
		u = append(u, j.work[v.Offset:v.Offset+v.Len]...)
	}
	return nil
}

// issue sends the uncompressed tensors and the Ps, orthogonalizes the
// summed Ps, computes and sends the Qs.
func (j *layerJob[T]) issue(ctx context.Context) (func(context.Context) error, error) {
	uw := j.u.allreduce(ctx, j.g)
	pw := j.p.allreduce(ctx, j.g)
	if err := j.p.wait(ctx, pw, "P"); err != nil {
		return nil, err
	}
	for k := range j.mats {
		lr := &j.mats[k]
		orthogonalize(lr.p, lr.n, lr.r, j.c.opts.OrthogonalizationEpsilon)
		mulMtP(lr.q, lr.mat, lr.p, lr.n, lr.m, lr.r)
	}
	qw := j.q.allreduce(ctx, j.g)
	return func(ctx context.Context) error { return j.finish(ctx, uw, qw) }, nil
}

// finish writes the averaged uncompressed tensors and P·Qᵀ into the
// bucket, recording the errors, and keeps the Qs for the next iteration.
func (j *layerJob[T]) finish(ctx context.Context, uw, qw pg.Work) error {
	ws := j.g.Size()
	if err := j.u.wait(ctx, uw, "the uncompressed tensors"); err != nil {
		return err
	}
	scale(j.u.data, ws)
	u := j.u.data
	for _, at := range j.plain {
		v := j.b.Params[at]
		dst := j.work[v.Offset : v.Offset+v.Len]
		if j.errs != nil {
			sub(j.errs[at], dst, u[:v.Len])
		}
		copy(dst, u[:v.Len])
		u = u[v.Len:]
	}
	if err := j.q.wait(ctx, qw, "Q"); err != nil {
		return err
	}
	scale(j.q.data, ws)
	for _, lr := range j.mats {
		var e []T
		if j.errs != nil {
			e = j.errs[lr.at]
		}
		decompressInto(lr.mat, e, lr.p, lr.q, lr.n, lr.m, lr.r)
		if lr.state != nil {
			copy(lr.state, lr.q)
		}
	}
	if !isView(j.work, j.b.Buffer) {
		return backend.Convert(j.b.Buffer, tensorOf(j.work))
	}
	return nil
}

// viewAs is t's memory as []T when t holds Ts, else nil.
func viewAs[T float](t pg.Tensor) []T {
	var zero T
	if tensorOf([]T{zero}).Dtype != t.Dtype {
		return nil
	}
	return pg.View[T](t)
}

func isView[T float](s []T, t pg.Tensor) bool {
	return len(s) > 0 && len(t.Data) > 0 && &tensorOf(s).Data[0] == &t.Data[0]
}

// add sets dst += src.
func add[T float](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// sub sets dst = a − b.
func sub[T float](dst, a, b []T) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] - b[i]
	}
}
