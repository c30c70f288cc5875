package tcp

import (
	"context"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/store"
)

// Note [probe listener]: a Group keeps the listener of its rendezvous
// open until Close, so that another rank's diagnosis can probe this one
// (pg's Note [network or process]): this host's kernel answers a dial to
// it even while the process is stopped, refuses it once the process is
// gone, and does not answer at all from across a partition. Connections
// that arrive after the rendezvous are closed at once, unread and
// unlogged. Each rank keeps every rank's published address for the
// probes it makes.

// probes is what a Group keeps for probing: its own listener (through
// the rendezvous's acceptor) and every rank's address.
type probes struct {
	acc   *acceptor
	addrs []string // by rank, as published in the store; "" where unknown
}

func (p *probes) stop() {
	if p != nil {
		p.acc.stop()
	}
}

// readLowerAddrs fills in the addresses of the ranks below this one,
// which connected to it, from the store; best effort: a rank whose
// address is missing is not probed.
func readLowerAddrs(ctx context.Context, st store.Store, o Options, addrs []string, log *zap.Logger) {
	for j := range o.Rank {
		b, err := st.Get(ctx, addrKey(j))
		if err != nil {
			log.Debug("reading a peer's address for probes", zap.Int("peer", j), zap.Error(err))
			return
		}
		addrs[j] = string(b)
	}
}

// ProbePeer implements backend.PeerProber: it dials rank's listener once,
// bounded by ctx (Note [probe listener]).
func (g *Group) ProbePeer(ctx context.Context, rank int) backend.Probe {
	if g.probes == nil || rank < 0 || rank >= len(g.probes.addrs) || rank == g.rank {
		return backend.Probe{}
	}
	return backend.ProbeAddr(ctx, g.probes.addrs[rank])
}

var _ backend.PeerProber = (*Group)(nil)
