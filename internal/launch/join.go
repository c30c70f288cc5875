package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
	"go.uber.org/zap"
)

// Self starts n copies of the running program as the workers of a
// single-machine job, with the same arguments, the rendezvous environment
// of StandaloneEnv and marker ("NAME=1") so each copy knows it is a
// worker. It waits for them as Run does.
func Self(ctx context.Context, n int, args []string, marker string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	jobEnv, err := StandaloneEnv(n)
	if err != nil {
		return err
	}
	return Run(ctx, Spec{
		N:      n,
		Path:   self,
		Args:   args,
		Env:    append(append(os.Environ(), jobEnv...), marker),
		Stdout: stdout,
		Stderr: stderr,
	})
}

// Member is a worker's place in a TCP job: the process group, and the
// rendezvous store it met its peers through (hosted by rank 0).
type Member struct {
	Group *tcp.Group
	store *store.TCPStore
}

// Store returns the job's rendezvous store (a TCPStore hosted by rank 0),
// which outlives Group: wrappers such as pg/desync keep state in it.
func (m *Member) Store() store.Store { return m.store }

// Close leaves the group and the store.
func (m *Member) Close() error {
	return errors.Join(m.Group.Close(), m.store.Close())
}

// JoinTCP connects this worker, described by e, to its job: it meets the
// other ranks through the TCP store at e's master address (hosting it on
// rank 0), then builds the TCP process group. opts supplies the listen
// address and tuning; its Rank, Size and Secret come from e.
func JoinTCP(ctx context.Context, e env.Config, opts tcp.Options, logger *zap.Logger) (*Member, error) {
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
		Addr: e.StoreAddr(), ListenAddr: e.StoreListenAddr(), IsServer: e.IsStoreHost(),
		Secret: e.Secret, Timeout: opts.Timeout, Logger: logger,
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d: rendezvous at %s: %w", e.Rank, e.StoreAddr(), err)
	}
	opts.Rank, opts.Size, opts.Secret = e.Rank, e.WorldSize, e.Secret
	if opts.Logger == nil {
		opts.Logger = logger
	}
	g, err := tcp.New(ctx, st, opts)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("rank %d: joining the process group: %w", e.Rank, err)
	}
	return &Member{Group: g, store: st}, nil
}
