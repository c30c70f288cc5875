package nccl

import (
	"context"

	"github.com/goddp/ddp/pg"
)

// Send sends t to dst (ncclSend, 2.7). NCCL matches sends and receives by
// order between two ranks and has no tags: tag is checked and recorded,
// not matched, as in ProcessGroupNCCL. The receiver must post a Recv of
// the same size, and a pair's point-to-point calls share the group's
// stream with its collectives, so they must be issued in a consistent
// order with them on both ranks.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	if err := pg.CheckPeer("send", t, dst, tag, g.rank, g.size); err != nil {
		return g.invalid(pg.OpSend, dst, err)
	}
	n := len(t.Data)
	return g.issue(ctx, desc{op: pg.OpSend, peer: dst, dtype: t.Dtype, inBytes: int64(n)}, func(s *stager) ([]part, error) {
		b, err := s.buffer(n)
		if err != nil {
			return nil, err
		}
		return []part{{
			upload: func() error { return s.upload(b, 0, t.Data) },
			comm:   func() error { return g.be.send(b.dev, n, dataType(pg.Uint8), dst) },
		}}, nil
	})
}

// Recv receives t from src (ncclRecv, 2.7); see Send.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if err := pg.CheckPeer("recv", t, src, tag, g.rank, g.size); err != nil {
		return g.invalid(pg.OpRecv, src, err)
	}
	n := len(t.Data)
	return g.issue(ctx, desc{op: pg.OpRecv, peer: src, dtype: t.Dtype, outBytes: int64(n)}, func(s *stager) ([]part, error) {
		b, err := s.buffer(n)
		if err != nil {
			return nil, err
		}
		return []part{{
			comm:     func() error { return g.be.recv(b.dev, n, dataType(pg.Uint8), src) },
			download: func() error { _, err := s.download(b, 0, n, t.Data); return err },
		}}, nil
	})
}
