package nccl

import (
	"fmt"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// bitwise reports whether op has no NCCL counterpart and is reduced on the
// host after an allgather (BAND, BOR, BXOR: NCCL has no bitwise ops).
func bitwise(op pg.ReduceOp) bool {
	return op.Kind == pg.Band || op.Kind == pg.Bor || op.Kind == pg.Bxor
}

// redOp maps op to NCCL's for dtype d. PREMUL_SUM makes an NCCL op
// (ncclRedOpCreatePreMulSum, 2.11) that s destroys after the NCCL calls.
func (s *stager) redOp(op pg.ReduceOp, d pg.Dtype) (libnccl.RedOp, error) {
	switch op.Kind {
	case pg.Sum:
		return libnccl.Sum, nil
	case pg.Product:
		return libnccl.Prod, nil
	case pg.Min:
		return libnccl.Min, nil
	case pg.Max:
		return libnccl.Max, nil
	case pg.Avg:
		if !s.g.be.HasAvg() {
			return 0, fmt.Errorf("%w: AVG needs NCCL 2.10", pg.ErrInvalidArgument)
		}
		return libnccl.Avg, nil
	case pg.PremulSum:
		r, err := s.g.be.PreMulSum(op.Factor, binding.DataType(d))
		if err != nil {
			return 0, err
		}
		s.cleanup = append(s.cleanup, func() { _ = s.g.be.DestroyOp(r) })
		return r, nil
	}
	return 0, fmt.Errorf("%w: %v has no NCCL reduction", pg.ErrInvalidArgument, op)
}

// reduceBytes folds size chunks of n bytes in all, bitwise with op, into
// dst. Bitwise operations act on every byte alone, whatever the dtype.
func reduceBytes(dst, all []byte, n, size int, op pg.ReduceKind) {
	copy(dst, all[:n])
	for r := 1; r < size; r++ {
		src := all[r*n : (r+1)*n]
		switch op {
		case pg.Band:
			for i := range dst {
				dst[i] &= src[i]
			}
		case pg.Bor:
			for i := range dst {
				dst[i] |= src[i]
			}
		case pg.Bxor:
			for i := range dst {
				dst[i] ^= src[i]
			}
		}
	}
}

// oneRankPremul reports whether op is PREMUL_SUM on a world of one, which
// is done on the host: NCCL 2.28.3's one-rank path left the last element
// of some odd counts unscaled in our GPU run (docs/nccl.md), and on one
// rank the result is just the scaled input.
func (s *stager) oneRankPremul(op pg.ReduceOp) bool {
	return s.g.size == 1 && op.Kind == pg.PremulSum
}

// scaleOnHost makes a part that writes in*factor to out on the host once
// the Work's event passes.
func (s *stager) scaleOnHost(out, in pg.Tensor, factor float64) part {
	src := append([]byte(nil), in.Data...)
	prev := s.w.post
	s.w.post = func() {
		if prev != nil {
			prev()
		}
		scale(pg.Tensor{Dtype: in.Dtype, Data: src}, factor)
		copy(out.Data, src)
	}
	return part{}
}

// scale multiplies every element of t by f.
func scale(t pg.Tensor, f float64) {
	switch t.Dtype {
	case pg.Float32:
		for i, v := range pg.View[float32](t) {
			pg.View[float32](t)[i] = v * float32(f)
		}
	case pg.Float64:
		for i, v := range pg.View[float64](t) {
			pg.View[float64](t)[i] = v * f
		}
	case pg.Float16:
		for i, v := range pg.View[uint16](t) {
			pg.View[uint16](t)[i] = backend.F32ToF16(backend.F16ToF32(v) * float32(f))
		}
	case pg.BFloat16:
		for i, v := range pg.View[uint16](t) {
			pg.View[uint16](t)[i] = backend.F32ToBF16(backend.BF16ToF32(v) * float32(f))
		}
	}
}
