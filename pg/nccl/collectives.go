package nccl

import (
	"context"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// AllReduce reduces t across ranks in place (ncclAllReduce; BAND, BOR and
// BXOR as an ncclAllGather reduced on the host).
func (g *Group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduce(t, op, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpAllReduce, pg.NoPeer, err)
	}
	if err := g.deviceAllReduce("allreduce", op, t); err != nil {
		return g.invalid(pg.OpAllReduce, pg.NoPeer, err)
	}
	n := int64(t.Bytes())
	return g.issue(ctx, desc{op: pg.OpAllReduce, peer: pg.NoPeer, dtype: t.Dtype, inBytes: n, outBytes: n},
		func(s *stager) ([]part, error) {
			p, err := s.allReduce(t, op)
			return []part{p}, err
		})
}

func (s *stager) allReduce(t pg.Tensor, op pg.ReduceOp) (part, error) {
	if t.IsDevice() {
		r, err := s.redOp(op, t.Dtype)
		if err != nil {
			return part{}, err
		}
		return part{comm: func() error {
			return s.g.be.AllReduce(dptr(t, 0), dptr(t, 0), t.Len(), binding.DataType(t.Dtype),
				r)
		}}, nil
	}
	if bitwise(op) {
		return s.bitwiseReduce(t, t.Data, op, true)
	}
	if s.oneRankPremul(op) {
		return s.scaleOnHost(t, t, op.Factor), nil
	}
	n := len(t.Data)
	b, err := s.buffer(n)
	if err != nil {
		return part{}, err
	}
	r, err := s.redOp(op, t.Dtype)
	if err != nil {
		return part{}, err
	}
	return part{
		upload:   func() error { return s.upload(b, 0, t.Data) },
		comm:     func() error { return s.g.be.AllReduce(b.dev, b.dev, t.Len(), binding.DataType(t.Dtype), r) },
		download: func() error { _, err := s.download(b, 0, n, t.Data); return err },
	}, nil
}

// bitwiseReduce gathers in from every rank and folds it on the host into
// out (when write).
func (s *stager) bitwiseReduce(in pg.Tensor, out []byte, op pg.ReduceOp, write bool) (part, error) {
	n, size, rank := len(in.Data), s.g.size, s.g.rank
	b, err := s.buffer(n * size)
	if err != nil {
		return part{}, err
	}
	return part{
		upload: func() error { return s.upload(b, rank*n, in.Data) },
		comm: func() error {
			return s.g.be.AllGather(b.dev+libnccl.DevicePtr(rank*n), b.dev, n, libnccl.Uint8)
		},
		download: func() error {
			if !write {
				return nil
			}
			all, err := s.download(b, 0, n*size, nil)
			if err == nil && n > 0 {
				prev := s.w.post
				s.w.post = func() {
					if prev != nil {
						prev()
					}
					reduceBytes(out, all, n, size, op.Kind)
				}
			}
			return err
		},
	}, nil
}

// Broadcast copies root's t to every rank (ncclBroadcast, in place).
func (g *Group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	if err := backend.CheckBroadcast(t, root, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpBroadcast, pg.NoPeer, err)
	}
	if _, err := g.onDevice("broadcast", t); err != nil {
		return g.invalid(pg.OpBroadcast, pg.NoPeer, err)
	}
	n := int64(t.Bytes())
	return g.issue(ctx, desc{op: pg.OpBroadcast, peer: pg.NoPeer, dtype: t.Dtype, inBytes: n, outBytes: n},
		func(s *stager) ([]part, error) {
			p, err := s.broadcast(t, root)
			return []part{p}, err
		})
}

func (s *stager) broadcast(t pg.Tensor, root int) (part, error) {
	if t.IsDevice() {
		return part{comm: func() error {
			return s.g.be.Broadcast(dptr(t, 0), dptr(t, 0), t.Len(), binding.DataType(t.Dtype), root)
		}}, nil
	}
	b, err := s.buffer(len(t.Data))
	if err != nil {
		return part{}, err
	}
	return part{
		upload: func() error {
			if s.g.rank != root {
				return nil
			}
			return s.upload(b, 0, t.Data)
		},
		comm: func() error { return s.g.be.Broadcast(b.dev, b.dev, t.Len(), binding.DataType(t.Dtype), root) },
		download: func() error {
			if s.g.rank == root {
				return nil
			}
			_, err := s.download(b, 0, len(t.Data), t.Data)
			return err
		},
	}, nil
}

// AllGather gathers every rank's in into out (ncclAllGather, in place in
// the staging buffer).
func (g *Group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	if err := backend.CheckAllGather(out, in, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpAllGather, pg.NoPeer, err)
	}
	if _, err := g.onDevice("allgather", out, in); err != nil {
		return g.invalid(pg.OpAllGather, pg.NoPeer, err)
	}
	return g.issue(ctx,
		desc{op: pg.OpAllGather, peer: pg.NoPeer, dtype: in.Dtype, inBytes: int64(in.Bytes()), outBytes: int64(out.Bytes())},
		func(s *stager) ([]part, error) {
			p, err := s.allGather(out, in)
			return []part{p}, err
		})
}

func (s *stager) allGather(out, in pg.Tensor) (part, error) {
	if in.IsDevice() {
		return part{comm: func() error {
			return s.g.be.AllGather(dptr(in, 0), dptr(out, 0), in.Len(),
				binding.DataType(in.Dtype))
		}}, nil
	}
	n := len(in.Data)
	b, err := s.buffer(len(out.Data))
	if err != nil {
		return part{}, err
	}
	off := s.g.rank * n
	return part{
		upload: func() error { return s.upload(b, off, in.Data) },
		comm: func() error {
			return s.g.be.AllGather(b.dev+libnccl.DevicePtr(off), b.dev, in.Len(), binding.DataType(in.Dtype))
		},
		download: func() error { _, err := s.download(b, 0, len(out.Data), out.Data); return err },
	}, nil
}

// ReduceScatter reduces in across ranks and writes chunk Rank() to out
// (ncclReduceScatter; bitwise ops through an allgather).
func (g *Group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatter(out, in, op, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpReduceScatter, pg.NoPeer, err)
	}
	if err := g.deviceAllReduce("reducescatter", op, out, in); err != nil {
		return g.invalid(pg.OpReduceScatter, pg.NoPeer, err)
	}
	return g.issue(ctx,
		desc{op: pg.OpReduceScatter, peer: pg.NoPeer, dtype: in.Dtype, inBytes: int64(in.Bytes()),
			outBytes: int64(out.Bytes())},
		func(s *stager) ([]part, error) {
			p, err := s.reduceScatter(out, in, op)
			return []part{p}, err
		})
}

func (s *stager) reduceScatter(out, in pg.Tensor, op pg.ReduceOp) (part, error) {
	if in.IsDevice() {
		r, err := s.redOp(op, in.Dtype)
		if err != nil {
			return part{}, err
		}
		if s.g.size == 1 {
			// Copy, then reduce in place: NCCL's one-rank out-of-place
			// AVG leaves some odd counts' last element unscaled.
			return part{
				upload: func() error {
					if out.Bytes() == 0 {
						return nil
					}
					return s.g.be.D2D(dptr(out, 0), dptr(in, 0), out.Bytes())
				},
				comm: func() error {
					return s.g.be.AllReduce(dptr(out, 0), dptr(out, 0), out.Len(), binding.DataType(in.Dtype), r)
				},
			}, nil
		}
		return part{comm: func() error {
			return s.g.be.ReduceScatter(dptr(in, 0), dptr(out, 0), out.Len(), binding.DataType(in.Dtype), r)
		}}, nil
	}
	m := len(out.Data)
	if s.oneRankPremul(op) {
		return s.scaleOnHost(out, in, op.Factor), nil
	}
	if bitwise(op) {
		whole := make([]byte, len(in.Data))
		p, err := s.bitwiseReduce(in, whole, op, true)
		if err != nil {
			return part{}, err
		}
		dl := p.download
		p.download = func() error {
			if err := dl(); err != nil {
				return err
			}
			prev := s.w.post
			rank := s.g.rank
			s.w.post = func() {
				if prev != nil {
					prev()
				}
				copy(out.Data, whole[rank*m:(rank+1)*m])
			}
			return nil
		}
		return p, nil
	}
	b, err := s.buffer(len(in.Data))
	if err != nil {
		return part{}, err
	}
	r, err := s.redOp(op, in.Dtype)
	if err != nil {
		return part{}, err
	}
	off := s.g.rank * m
	return part{
		upload: func() error { return s.upload(b, 0, in.Data) },
		comm: func() error {
			return s.g.be.ReduceScatter(b.dev, b.dev+libnccl.DevicePtr(off), out.Len(), binding.DataType(in.Dtype), r)
		},
		download: func() error { _, err := s.download(b, off, m, out.Data); return err },
	}, nil
}

// Barrier is an allreduce of one float32, as in ProcessGroupNCCL; it
// finishes when every rank's allreduce has.
func (g *Group) Barrier(ctx context.Context) pg.Work {
	return g.issue(ctx, desc{op: pg.OpBarrier, peer: pg.NoPeer}, func(s *stager) ([]part, error) {
		b, err := s.buffer(4)
		if err != nil {
			return nil, err
		}
		return []part{{comm: func() error { return s.g.be.AllReduce(b.dev, b.dev, 1, libnccl.Float32, libnccl.Sum) }}}, nil
	})
}
