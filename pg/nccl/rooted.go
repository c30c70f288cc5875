package nccl

import (
	"context"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// Reduce reduces t into root's t (ncclReduce; bitwise ops through an
// allgather reduced on root).
func (g *Group) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduce(t, root, op, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpReduce, pg.NoPeer, err)
	}
	if err := g.deviceAllReduce("reduce", op, t); err != nil {
		return g.invalid(pg.OpReduce, pg.NoPeer, err)
	}
	n := t.Bytes()
	return g.issue(ctx, desc{op: pg.OpReduce, peer: pg.NoPeer, dtype: t.Dtype, inBytes: int64(n), outBytes: int64(n)},
		func(s *stager) ([]part, error) {
			if t.IsDevice() {
				r, err := s.redOp(op, t.Dtype)
				if err != nil {
					return nil, err
				}
				return []part{{comm: func() error {
					return g.be.Reduce(dptr(t, 0), dptr(t, 0), t.Len(), binding.DataType(t.Dtype),
						r, root)
				}}}, nil
			}
			if bitwise(op) {
				p, err := s.bitwiseReduce(t, t.Data, op, g.rank == root)
				return []part{p}, err
			}
			if s.oneRankPremul(op) {
				return []part{s.scaleOnHost(t, t, op.Factor)}, nil
			}
			b, err := s.buffer(n)
			if err != nil {
				return nil, err
			}
			r, err := s.redOp(op, t.Dtype)
			if err != nil {
				return nil, err
			}
			return []part{{
				upload: func() error { return s.upload(b, 0, t.Data) },
				comm:   func() error { return g.be.Reduce(b.dev, b.dev, t.Len(), binding.DataType(t.Dtype), r, root) },
				download: func() error {
					if g.rank != root {
						return nil
					}
					_, err := s.download(b, 0, n, t.Data)
					return err
				},
			}}, nil
		})
}

// Gather collects every rank's in into root's out, with grouped
// ncclSend/ncclRecv (2.7), as ProcessGroupNCCL does.
func (g *Group) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckGather(out, in, root, g.rank, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpGather, pg.NoPeer, err)
	}
	ts := []pg.Tensor{in}
	if g.rank == root {
		ts = append(ts, out)
	}
	if _, err := g.onDevice("gather", ts...); err != nil {
		return g.invalid(pg.OpGather, pg.NoPeer, err)
	}
	n := in.Bytes()
	outBytes := int64(0)
	if g.rank == root {
		outBytes = int64(out.Bytes())
	}
	return g.issue(ctx, desc{op: pg.OpGather, peer: pg.NoPeer, dtype: in.Dtype, inBytes: int64(n), outBytes: outBytes},
		func(s *stager) ([]part, error) {
			dt, count := binding.DataType(in.Dtype), in.Len()
			if in.IsDevice() {
				if g.rank != root {
					return []part{{comm: func() error { return g.be.Send(dptr(in, 0), count, dt, root) }}}, nil
				}
				parts := []part{{upload: func() error {
					if n == 0 {
						return nil
					}
					return g.be.D2D(dptr(out, root*count), dptr(in, 0), n)
				}}}
				for r := 0; r < g.size; r++ {
					if r != root {
						parts = append(parts, part{comm: func() error { return g.be.Recv(dptr(out, r*count), count, dt, r) }})
					}
				}
				return parts, nil
			}
			if g.rank != root {
				b, err := s.buffer(n)
				if err != nil {
					return nil, err
				}
				return []part{{
					upload: func() error { return s.upload(b, 0, in.Data) },
					comm:   func() error { return g.be.Send(b.dev, count, dt, root) },
				}}, nil
			}
			b, err := s.buffer(n * g.size)
			if err != nil {
				return nil, err
			}
			parts := []part{{
				upload:   func() error { return s.upload(b, root*n, in.Data) },
				download: func() error { _, err := s.download(b, 0, n*g.size, out.Data); return err },
			}}
			for r := 0; r < g.size; r++ {
				if r != root {
					parts = append(parts, part{comm: func() error { return g.be.Recv(b.dev+libnccl.DevicePtr(r*n), count, dt, r) }})
				}
			}
			return parts, nil
		})
}

// Scatter sends chunk i of root's in to rank i's out, with grouped
// ncclSend/ncclRecv.
func (g *Group) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckScatter(out, in, root, g.rank, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpScatter, pg.NoPeer, err)
	}
	ts := []pg.Tensor{out}
	if g.rank == root {
		ts = append(ts, in)
	}
	if _, err := g.onDevice("scatter", ts...); err != nil {
		return g.invalid(pg.OpScatter, pg.NoPeer, err)
	}
	m := out.Bytes()
	inBytes := int64(0)
	if g.rank == root {
		inBytes = int64(in.Bytes())
	}
	return g.issue(ctx, desc{op: pg.OpScatter, peer: pg.NoPeer, dtype: out.Dtype, inBytes: inBytes, outBytes: int64(m)},
		func(s *stager) ([]part, error) {
			dt, count := binding.DataType(out.Dtype), out.Len()
			if out.IsDevice() {
				if g.rank != root {
					return []part{{comm: func() error { return g.be.Recv(dptr(out, 0), count, dt, root) }}}, nil
				}
				parts := []part{{upload: func() error {
					if m == 0 {
						return nil
					}
					return g.be.D2D(dptr(out, 0), dptr(in, root*count), m)
				}}}
				for r := 0; r < g.size; r++ {
					if r != root {
						parts = append(parts, part{comm: func() error { return g.be.Send(dptr(in, r*count), count, dt, r) }})
					}
				}
				return parts, nil
			}
			if g.rank != root {
				b, err := s.buffer(m)
				if err != nil {
					return nil, err
				}
				return []part{{
					comm:     func() error { return g.be.Recv(b.dev, count, dt, root) },
					download: func() error { _, err := s.download(b, 0, m, out.Data); return err },
				}}, nil
			}
			b, err := s.buffer(m * g.size)
			if err != nil {
				return nil, err
			}
			parts := []part{{
				upload:   func() error { return s.upload(b, 0, in.Data) },
				download: func() error { _, err := s.download(b, root*m, m, out.Data); return err },
			}}
			for r := 0; r < g.size; r++ {
				if r != root {
					parts = append(parts, part{comm: func() error { return g.be.Send(b.dev+libnccl.DevicePtr(r*m), count, dt, r) }})
				}
			}
			return parts, nil
		})
}

// AllToAll exchanges chunks with every rank through grouped
// ncclSend/ncclRecv, as ProcessGroupNCCL's alltoall_base.
func (g *Group) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	outS, inS, err := backend.CheckAllToAll(out, in, outSplits, inSplits, g.size, backend.AcceptDevice)
	if err != nil {
		return g.invalid(pg.OpAllToAll, pg.NoPeer, err)
	}
	if _, err := g.onDevice("alltoall", out, in); err != nil {
		return g.invalid(pg.OpAllToAll, pg.NoPeer, err)
	}
	return g.issue(ctx,
		desc{op: pg.OpAllToAll, peer: pg.NoPeer, dtype: in.Dtype, inBytes: int64(in.Bytes()), outBytes: int64(out.Bytes())},
		func(s *stager) ([]part, error) {
			es, dt := in.Dtype.Size(), binding.DataType(in.Dtype)
			if in.IsDevice() {
				parts := []part{{}}
				inOff, outOff := 0, 0
				for r := 0; r < g.size; r++ {
					io, oo, ic, oc := inOff, outOff, inS[r], outS[r]
					if ic > 0 {
						parts = append(parts, part{comm: func() error { return g.be.Send(dptr(in, io), ic, dt, r) }})
					}
					if oc > 0 {
						parts = append(parts, part{comm: func() error { return g.be.Recv(dptr(out, oo), oc, dt, r) }})
					}
					inOff += ic
					outOff += oc
				}
				if len(parts) == 2 {
					parts = append(parts, part{})
				}
				return parts, nil
			}
			bi, err := s.buffer(len(in.Data))
			if err != nil {
				return nil, err
			}
			bo, err := s.buffer(len(out.Data))
			if err != nil {
				return nil, err
			}
			parts := []part{{
				upload:   func() error { return s.upload(bi, 0, in.Data) },
				download: func() error { _, err := s.download(bo, 0, len(out.Data), out.Data); return err },
			}}
			inOff, outOff := 0, 0
			for r := 0; r < g.size; r++ {
				io, oo, ic, oc := inOff, outOff, inS[r], outS[r]
				if ic > 0 {
					parts = append(parts, part{comm: func() error { return g.be.Send(bi.dev+libnccl.DevicePtr(io*es), ic, dt, r) }})
				}
				if oc > 0 {
					parts = append(parts, part{comm: func() error { return g.be.Recv(bo.dev+libnccl.DevicePtr(oo*es), oc, dt, r) }})
				}
				inOff += ic
				outOff += oc
			}
			if len(parts) == 2 { // a single comm part would not be grouped; a send and recv to self must be
				parts = append(parts, part{})
			}
			return parts, nil
		})
}
