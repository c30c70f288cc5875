package commhook

import (
	"context"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// BatchedPowerSGD is torch's batched_powerSGD_hook: PowerSGD on the whole
// bucket at once, viewed as one square matrix. A bucket of N elements is
// zero-padded to s×s, s = ⌈√N⌉, and compressed to P and Q of s×r each,
// whatever the tensors in it; nothing is sent uncompressed. It is cheaper
// than PowerSGD, but mixing tensors in one matrix destroys their
// low-rank structure, so torch advises it only where rank 1 is accurate
// enough. MinCompressionRate is not used.
//
// Differences from torch, none of which changes the defaults' results:
// r is capped at s (torch would orthogonalize more columns than rows);
// OrthogonalizationEpsilon applies here too (torch's batched hook
// ignores it and uses 0); state is keyed by the bucket's parameters, so
// a bucket of other parameters (the first iteration after a resume,
// before buckets are rebuilt) starts fresh instead of failing; random Qs
// come from a PCG seeded with (RandomSeed, iteration<<32 | the bucket's
// first parameter index).
//
// Otherwise it is PowerSGD: plain allreduce before StartIter, error
// feedback (over the padded matrix, as torch), warm start, the iteration
// counted on the last bucket, and collectives in bucket order.
type BatchedPowerSGD struct{ c core }

// NewBatchedPowerSGD returns a BatchedPowerSGD hook, or an error wrapping
// ErrInvalidConfig.
func NewBatchedPowerSGD(o PowerSGDOptions) (*BatchedPowerSGD, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &BatchedPowerSGD{c: core{name: "batched_powersgd", opts: o, st: newPowerState()}}, nil
}

// Name is "batched_powersgd".
func (h *BatchedPowerSGD) Name() string { return h.c.name }

// Run communicates bucket b; see BatchedPowerSGD.
func (h *BatchedPowerSGD) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	return h.c.run(ctx, g, b, func() (job, error) {
		switch b.Buffer.Dtype {
		case pg.Float64:
			return newBatchedJob[float64](&h.c, g, b)
		case pg.Float32, pg.Float16, pg.BFloat16:
			return newBatchedJob[float32](&h.c, g, b)
		}
		return nil, fmt.Errorf("commhook: batched_powersgd cannot compress a %v bucket", b.Buffer.Dtype)
	})
}

// State returns a copy of h's state: see Stateful.
func (h *BatchedPowerSGD) State() map[string][]float64 { return h.c.State() }

// LoadState replaces h's state: see Stateful.
func (h *BatchedPowerSGD) LoadState(st map[string][]float64) error { return h.c.LoadState(st) }

// CompressionStats is as PowerSGD's.
func (h *BatchedPowerSGD) CompressionStats() (rate float64, before, after int) { return h.c.stats() }

// squareSide is ⌈√n⌉, exactly.
func squareSide(n int) int {
	s := int(math.Sqrt(float64(n)))
	for s*s < n {
		s++
	}
	for s > 0 && (s-1)*(s-1) >= n {
		s--
	}
	return s
}

// batchedJob is one bucket's compression as one s×s matrix.
type batchedJob[T float] struct {
	c      *core
	g      pg.ProcessGroup
	b      *GradBucket
	s, r   int
	mat    []T // the padded s×s matrix
	errs   []T // error feedback (nil: off)
	addErr bool
	state  []T // the Q kept across iterations (nil: not kept)
	fresh  bool
	stream uint64
	p, q   vec[T]
}

func newBatchedJob[T float](c *core, g pg.ProcessGroup, b *GradBucket) (*batchedJob[T], error) {
	n := b.Buffer.Len()
	s := squareSide(n)
	r := min(c.opts.MatrixApproximationRank, s)
	j := &batchedJob[T]{c: c, g: g, b: b, s: s, r: r, fresh: true}
	c.st.numelBefore += n
	c.st.numelAfter += 2 * s * r
	key := bucketKey(b.Params)
	first := 0
	if len(b.Params) > 0 {
		first = b.Params[0].Index
	}
	j.stream = uint64(c.st.iter)<<32 | uint64(uint32(first))
	var err error
	if c.opts.UseErrorFeedback {
		if j.errs, j.addErr, err = stateVec[T](c.st.errs, key, s*s); err != nil {
			return nil, err
		}
	}
	if c.opts.WarmStart {
		var found bool
		if j.state, found, err = stateVec[T](c.st.qs, key, s*r); err != nil {
			return nil, err
		}
		j.fresh = !found
	}
	wire := b.Buffer.Dtype
	j.p = vec[T]{data: make([]T, s*r), wire: wire}
	j.q = vec[T]{data: make([]T, s*r), wire: wire}
	return j, nil
}

// prepare pads the bucket into the matrix, adds the error, and computes
// P = M·Q from the orthogonalized Q.
func (j *batchedJob[T]) prepare() error {
	j.mat = make([]T, j.s*j.s)
	if err := backend.Convert(tensorOf(j.mat[:j.b.Buffer.Len()]), j.b.Buffer); err != nil {
		return err
	}
	if j.addErr {
		add(j.mat, j.errs)
	}
	if j.fresh {
		fillNormal(j.q.data, j.c.opts.RandomSeed, j.stream)
	} else {
		copy(j.q.data, j.state)
	}
	orthogonalize(j.q.data, j.s, j.r, j.c.opts.OrthogonalizationEpsilon)
	mulMQ(j.p.data, j.mat, j.q.data, j.s, j.s, j.r)
	return nil
}

// issue sends P, orthogonalizes the sum, computes and sends Q.
func (j *batchedJob[T]) issue(ctx context.Context) (func(context.Context) error, error) {
	if err := j.p.wait(ctx, j.p.allreduce(ctx, j.g), "P"); err != nil {
		return nil, err
	}
	orthogonalize(j.p.data, j.s, j.r, j.c.opts.OrthogonalizationEpsilon)
	mulMtP(j.q.data, j.mat, j.p.data, j.s, j.s, j.r)
	qw := j.q.allreduce(ctx, j.g)
	return func(ctx context.Context) error { return j.finish(ctx, qw) }, nil
}

// finish writes P·Qᵀ, truncated to the bucket's length, into the bucket.
func (j *batchedJob[T]) finish(ctx context.Context, qw pg.Work) error {
	if err := j.q.wait(ctx, qw, "Q"); err != nil {
		return err
	}
	scale(j.q.data, j.g.Size())
	decompressInto(j.mat, j.errs, j.p.data, j.q.data, j.s, j.s, j.r)
	if j.state != nil {
		copy(j.state, j.q.data)
	}
	return backend.Convert(j.b.Buffer, tensorOf(j.mat[:j.b.Buffer.Len()]))
}
