package ft

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// TCPOptions configure TCPConnector's groups.
type TCPOptions struct {
	Secret []byte
	// ListenAddr is where each group listens: "127.0.0.1:0", or a host's
	// address with port 0.
	ListenAddr    string
	AdvertiseAddr string
	// Timeout is each group's collective timeout (tcp.Options.Timeout): a
	// stalled peer fails the step after it. Zero means pg.DefaultTimeout.
	Timeout time.Duration
	// NoSharedMemory and LinkBytesPerSec are tcp.Options'.
	NoSharedMemory  bool
	LinkBytesPerSec int64
	Logger          *zap.Logger
}

// TCPConnector joins each quorum's group as a pg/tcp group (shared memory
// between the members on one host included), rendezvousing on the
// primary's store under the quorum's prefix.
func TCPConnector(o TCPOptions) Connector {
	return func(ctx context.Context, c GroupConfig) (pg.ProcessGroup, error) {
		st, err := store.Dial(ctx, c.StoreAddress, store.ClientOptions{Secret: o.Secret, Timeout: o.Timeout,
			Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("the primary's store %s: %w", c.StoreAddress, err)
		}
		g, err := tcp.New(ctx, store.NewPrefixStore(c.Prefix, st), tcp.Options{Rank: c.Rank, Size: c.Size,
			Secret: o.Secret, ListenAddr: o.ListenAddr, AdvertiseAddr: o.AdvertiseAddr, Timeout: o.Timeout,
			NoSharedMemory: o.NoSharedMemory, LinkBytesPerSec: o.LinkBytesPerSec, Logger: o.Logger})
		if err != nil {
			st.Close()
			return nil, err
		}
		return &storeGroup{Group: g, st: st}, nil
	}
}

// storeGroup is a tcp group that closes its store client with it.
type storeGroup struct {
	*tcp.Group
	st *store.Client
}

func (g *storeGroup) Close() error {
	err := g.Group.Close()
	g.st.Close()
	return err
}

// Unwrap is the tcp group, for pg.As.
func (g *storeGroup) Unwrap() pg.ProcessGroup { return g.Group }
