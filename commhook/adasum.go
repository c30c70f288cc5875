package commhook

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"runtime/debug"
	"slices"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Adasum is Horovod's Adasum reduction (hvd.Adasum) as a comm hook.
// Instead of averaging, it combines two gradients a and b as
//
//	Adasum(a, b) = (1 - a·b / (2‖a‖²)) a + (1 - a·b / (2‖b‖²)) b
//
// so that parallel gradients are averaged (Adasum(a, a) = a) and
// orthogonal ones added (a·b = 0 gives a + b). A coefficient whose
// squared norm is below 1e-8 is 1, as in Horovod. Across ranks it is
// applied as a binary tree, ranks 2i and 2i+1 first, then pairs of pairs:
// for 4 ranks Adasum(Adasum(g0, g1), Adasum(g2, g3)).
//
// It is Horovod's CPU algorithm (horovod/common/ops/adasum/adasum.h):
// recursive vector halving, distance doubling. At level 1, 2, 4, ...
// each rank swaps half of its slice of the bucket with rank^level (Send
// and Recv), so that the pair holds the two halves of their combined
// vector; the dot products and squared norms are taken in float64 per
// parameter (not per bucket: each ParamView is one of Horovod's tensors)
// and summed over the ranks that have met so far, and each rank updates
// its half. The slices are then gathered back in reverse. Each rank sends
// about twice the bucket, as ring allreduce does.
//
// As in Horovod, the world size must be a power of two (Run fails with an
// error saying so otherwise), the group must have Send and Recv
// (pg.PointToPoint), and the bucket float16, float32 or float64. Nothing
// is divided: Horovod's CPU Adasum has divisor 1. float32 products are
// rounded to float32 before they are added in float64 and float16 ones are
// taken in float64, as Horovod's kernels do; the update a = ca·a + cb·b is
// computed in float64 (float32 for float16 buckets) and rounded once.
//
// An Adasum orders its buckets' communication itself (see Note [issue
// order across buckets]), so one Adasum serves one reducer; NewAdasum
// makes one.
type Adasum struct {
	seq  sequence
	recv []byte // Horovod's recv_buffer, used by one bucket at a time (in its turn)
}

// NewAdasum returns an Adasum hook for one reducer.
func NewAdasum() *Adasum { return &Adasum{} }

// Name is "adasum".
func (*Adasum) Name() string { return "adasum" }

// adasumNormFloor is Horovod's: a squared norm below it leaves its
// coefficient at 1.
const adasumNormFloor = 1e-8

// adasumTagsPerBucket spaces the point-to-point tags of successive
// buckets: two per level, at most 62 levels.
const adasumTagsPerBucket = 128

// Run checks b and g and starts the reduction on a goroutine.
func (a *Adasum) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	prev, mine := a.seq.take()
	if err := checkAdasum(g, b); err != nil {
		mine.pass(err)
		return pg.Completed(err)
	}
	if g.Size() == 1 {
		mine.pass(nil)
		return pg.Completed(nil)
	}
	f := pg.NewFuture()
	go func() { f.Complete(a.chain(ctx, g, b, prev, mine)) }()
	return f
}

func checkAdasum(g pg.ProcessGroup, b *GradBucket) error {
	if n := g.Size(); bits.OnesCount(uint(n)) != 1 {
		return fmt.Errorf("commhook: Adasum needs a power-of-two number of ranks, as Horovod's does; this group has %d "+
			"(use %d or %d ranks, or another hook)", n, 1<<(bits.Len(uint(n))-1), 1<<bits.Len(uint(n)))
	}
	if b.Buffer.IsDevice() {
		return fmt.Errorf("commhook: Adasum computes its dot products on the host, and this bucket is in device memory: " +
			"keep buckets on the host for it")
	}
	switch b.Buffer.Dtype {
	case pg.Float16, pg.Float32, pg.Float64:
	default:
		return fmt.Errorf("commhook: Adasum reduces float16, float32 and float64 gradients, as Horovod's does, not %v",
			b.Buffer.Dtype)
	}
	var p2p pg.PointToPoint
	if !pg.As(g, &p2p) && g.Size() > 1 {
		return fmt.Errorf("commhook: Adasum needs Send and Recv (pg.PointToPoint), which a %s group lacks", pg.BackendName(g))
	}
	return nil
}

// adasumSegments returns the lengths of the bucket's tensors, in buffer
// order: one per parameter, and one per stretch of the buffer no
// parameter covers. A bucket without parameters is one tensor.
func adasumSegments(b *GradBucket) ([]int, error) {
	n := b.Buffer.Len()
	if len(b.Params) == 0 {
		return []int{n}, nil
	}
	ps := slices.Clone(b.Params)
	slices.SortFunc(ps, func(x, y ParamView) int { return x.Offset - y.Offset })
	var segs []int
	at := 0
	for _, p := range ps {
		if p.Offset < at || p.Len < 0 || p.Offset+p.Len > n {
			return nil, fmt.Errorf(
				"commhook: Adasum: parameter %q at [%d, %d) overlaps another or lies outside the bucket of %d elements", p.Name,
				p.Offset, p.Offset+p.Len, n)
		}
		if p.Offset > at {
			segs = append(segs, p.Offset-at)
		}
		segs = append(segs, p.Len)
		at = p.Offset + p.Len
	}
	if at < n {
		segs = append(segs, n-at)
	}
	return segs, nil
}

// chain runs the whole exchange in its turn: every rank issues its
// point-to-point messages and norm allreduces bucket by bucket.
func (a *Adasum) chain(ctx context.Context, g pg.ProcessGroup, b *GradBucket, prev, mine *turn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("commhook: adasum panicked: %v\n%s", p, debug.Stack())
		}
		mine.pass(err)
	}()
	counts, err := adasumSegments(b)
	if err != nil {
		return err
	}
	if err := prev.wait(ctx); err != nil {
		return err
	}
	if b.Buffer.Len() == 0 {
		return nil // every rank has the same layout, so every rank skips it
	}
	if n := len(b.Buffer.Data); cap(a.recv) < n {
		a.recv = make([]byte, n)
	}
	recv := pg.Tensor{Dtype: b.Buffer.Dtype, Data: a.recv[:len(b.Buffer.Data)]}
	return adasumVHDD(ctx, g, b.Buffer, recv, counts, b.Index*adasumTagsPerBucket)
}

// adasumVHDD is Horovod's FusedAllreduce: buf holds this rank's gradient
// on entry and the Adasum of all ranks' on return. counts are the lengths
// of buf's tensors, back to back; recv is scratch of buf's size. The
// point-to-point tags count up from tag.
func adasumVHDD(ctx context.Context, g pg.ProcessGroup, buf, recv pg.Tensor, counts []int, tag int) error {
	var p2p pg.PointToPoint
	if !pg.As(g, &p2p) {
		return fmt.Errorf("commhook: Adasum needs Send and Recv (pg.PointToPoint), which a %s group lacks", pg.BackendName(g))
	}
	rank, size := g.Rank(), g.Size()
	lo, mine := 0, buf.Len() // this rank's slice of buf: [lo, lo+mine)
	var given [][]int        // per level, the part of each tensor handed to the neighbor
	sendrecv := func(peer int, send, into pg.Tensor) error {
		ws := p2p.Send(ctx, send, peer, tag)
		wr := p2p.Recv(ctx, into, peer, tag)
		tag++
		if err := pg.WaitAll(ctx, ws, wr); err != nil {
			return fmt.Errorf("commhook: adasum: exchanging with rank %d: %w", peer, err)
		}
		return nil
	}

	// Distance doubling, vector halving.
	for level := 1; level < size; level <<= 1 {
		peer := rank ^ level
		right := rank&level != 0
		first := mine / 2
		var keep, give int                  // elements kept and handed over
		split := prefixSplit(counts, first) // per tensor, the part of the slice's first `first` elements
		gave := make([]int, len(counts))
		if right { // keep the second half
			keep, give = mine-first, first
			for i := range counts {
				gave[i] = split[i]
				counts[i] -= split[i]
			}
			if err := sendrecv(peer, buf.Slice(lo, lo+give), recv.Slice(lo+give, lo+give+keep)); err != nil {
				return err
			}
			lo += give
		} else { // keep the first half
			keep, give = first, mine-first
			for i := range counts {
				gave[i] = counts[i] - split[i]
				counts[i] = split[i]
			}
			if err := sendrecv(peer, buf.Slice(lo+keep, lo+keep+give), recv.Slice(lo, lo+keep)); err != nil {
				return err
			}
		}
		mine = keep
		given = append(given, gave)
		if err := adasumPairwise(ctx, g, buf.Slice(lo, lo+mine), recv.Slice(lo, lo+mine), counts, !right, level); err != nil {
			return err
		}
	}

	// Distance halving: gather the slices back.
	for level := size >> 1; level > 0; level >>= 1 {
		peer := rank ^ level
		gave := given[len(given)-1]
		given = given[:len(given)-1]
		back := 0
		for i, c := range gave {
			back += c
			counts[i] += c
		}
		var into pg.Tensor
		if rank&level == 0 {
			into = buf.Slice(lo+mine, lo+mine+back)
		} else {
			into = buf.Slice(lo-back, lo)
		}
		if err := sendrecv(peer, buf.Slice(lo, lo+mine), into); err != nil {
			return err
		}
		if rank&level != 0 {
			lo -= back
		}
		mine += back
	}
	return nil
}

// prefixSplit returns, for tensors of lengths counts laid back to back,
// how much of each lies in the first n elements.
func prefixSplit(counts []int, n int) []int {
	out := make([]int, len(counts))
	for i, c := range counts {
		out[i] = min(c, n)
		n -= out[i]
	}
	return out
}

// adasumPairwise is Horovod's FusedPairwiseReduceWithComm: a is this
// rank's slice, b the neighbor's matching slice, both holding parts of
// the tensors of lengths counts. The dot products and squared norms are
// summed over the 2·level ranks that share this rank's block (with one
// allreduce over the whole group, each block summing in its own slots),
// then a = ca·a + cb·b per tensor. left says a is the left operand (the
// lower ranks' vector).
func adasumPairwise(ctx context.Context, g pg.ProcessGroup, a, b pg.Tensor, counts []int, left bool, level int) error {
	nt := len(counts)
	blocks := g.Size() / (2 * level)
	sums := make([]float64, 3*nt*blocks)
	mineAt := (g.Rank() / (2 * level)) * 3 * nt
	at := 0
	for i, c := range counts {
		dot, an, bn := dotAndNorms(a.Slice(at, at+c), b.Slice(at, at+c))
		s := sums[mineAt+3*i:]
		s[0] = dot
		if left {
			s[1], s[2] = an, bn
		} else {
			s[1], s[2] = bn, an
		}
		at += c
	}
	if err := g.AllReduce(ctx, pg.Float64s(sums), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return fmt.Errorf("commhook: adasum: summing dot products and norms at level %d: %w", level, err)
	}
	at = 0
	for i, c := range counts {
		s := sums[mineAt+3*i:]
		dot, an, bn := s[0], s[1], s[2]
		if !left {
			an, bn = bn, an
		}
		ca, cb := 1.0, 1.0
		if an >= adasumNormFloor {
			ca = 1 - dot/an*0.5
		}
		if bn >= adasumNormFloor {
			cb = 1 - dot/bn*0.5
		}
		scaledAdd(ca, a.Slice(at, at+c), cb, b.Slice(at, at+c))
		at += c
	}
	return nil
}

// dotAndNorms returns a·b, ‖a‖² and ‖b‖², accumulated in float64 as
// Horovod's ComputeDotAndNormSqrds: float32 products are float32, then
// added in float64; float16 ones are taken in float64.
func dotAndNorms(a, b pg.Tensor) (dot, an, bn float64) {
	switch a.Dtype {
	case pg.Float64:
		x, y := pg.View[float64](a), pg.View[float64](b)
		for i := range x {
			dot += x[i] * y[i]
			an += x[i] * x[i]
			bn += y[i] * y[i]
		}
	case pg.Float32:
		x, y := pg.View[float32](a), pg.View[float32](b)
		for i := range x {
			dot += float64(float32(x[i] * y[i]))
			an += float64(float32(x[i] * x[i]))
			bn += float64(float32(y[i] * y[i]))
		}
	case pg.Float16:
		x, y := pg.View[uint16](a), pg.View[uint16](b)
		for i := range x {
			u, v := float64(backend.F16ToF32(x[i])), float64(backend.F16ToF32(y[i]))
			dot = math.FMA(u, v, dot)
			an = math.FMA(u, u, an)
			bn = math.FMA(v, v, bn)
		}
	}
	return dot, an, bn
}

// scaledAdd sets a = ca·a + cb·b, as Horovod's ScaledAdd: in float64 for
// float32 and float64 tensors, in float32 (ca·a, then a fused multiply
// add of cb·b) for float16 ones.
func scaledAdd(ca float64, a pg.Tensor, cb float64, b pg.Tensor) {
	switch a.Dtype {
	case pg.Float64:
		x, y := pg.View[float64](a), pg.View[float64](b)
		for i := range x {
			x[i] = ca*x[i] + cb*y[i]
		}
	case pg.Float32:
		x, y := pg.View[float32](a), pg.View[float32](b)
		for i := range x {
			x[i] = float32(ca*float64(x[i]) + cb*float64(y[i]))
		}
	case pg.Float16:
		x, y := pg.View[uint16](a), pg.View[uint16](b)
		fa, fb := float32(ca), float32(cb)
		for i := range x {
			ax := fa * backend.F16ToF32(x[i])
			x[i] = backend.F32ToF16(float32(math.FMA(float64(fb), float64(backend.F16ToF32(y[i])), float64(ax))))
		}
	}
}
