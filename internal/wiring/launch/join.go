package launch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/goddp/ddp/pg"
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
// rendezvous store it met its peers through.
type Member struct {
	Group     *tcp.Group
	store     store.Store // what the group met through, under goddp's prefix on the agent's store
	closer    io.Closer   // the connection (and server) behind store
	storeHost int         // the rank hosting the store, or pg.NoPeer
}

// Store returns the job's rendezvous store, which outlives Group:
// wrappers such as pg/desync keep state in it. It is the TCPStore hosted
// by rank 0, or, under torchrun's agent store, that store under goddp's
// prefix (AgentPrefix).
func (m *Member) Store() store.Store { return m.store }

// StoreHost returns the rank whose process hosts the store: 0, or
// pg.NoPeer when torchrun's agent serves it.
func (m *Member) StoreHost() int { return m.storeHost }

// Close leaves the group and the store.
func (m *Member) Close() error {
	return errors.Join(m.Group.Close(), m.closer.Close())
}

// JoinTCP connects this worker, described by e, to its job: it meets the
// other ranks through a store, then builds the TCP process group. opts
// supplies the listen address and tuning; its Rank, Size and Secret come
// from e.
//
// The store is goddp's authenticated TCPStore at e's master address,
// hosted by rank 0, unless e.UseAgentStore says that torchrun's agent
// already serves a c10d TCPStore there: then every rank is a client of
// the agent's store (store.DialC10d), and goddp's keys live under
// AgentPrefix(e). That store is unauthenticated, so only addresses go
// through it; the connections between ranks still prove e.Secret.
func JoinTCP(ctx context.Context, e env.Config, opts tcp.Options, logger *zap.Logger) (*Member, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	m := &Member{storeHost: 0}
	if e.UseAgentStore {
		if len(e.Secret) == 0 {
			if e.WorldSize > 1 {
				return nil, fmt.Errorf("%w: rank %d: torchrun's agent store is unauthenticated, so goddp does not pass its secret through it: export GODDP_SECRET (e.g. export GODDP_SECRET=$(openssl rand -hex 32)) where torchrun runs, the same on every node", pg.ErrInvalidArgument, e.Rank)
			}
			e.Secret = make([]byte, 32) // one rank: no peer to share it with
			if _, err := rand.Read(e.Secret); err != nil {
				return nil, err
			}
		}
		c, err := store.DialC10d(ctx, e.StoreAddr(), store.C10dOptions{Timeout: opts.Timeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous through torchrun's agent store at %s: %w", e.Rank, e.StoreAddr(), err)
		}
		prefix := AgentPrefix(e)
		logger.Info("rendezvous through torchrun's agent store", zap.String("addr", e.StoreAddr()),
			zap.Stringer("protocol", c.Protocol()), zap.String("prefix", prefix+"/"))
		m.store, m.closer, m.storeHost = store.NewPrefixStore(prefix, c), c, pg.NoPeer
	} else {
		st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
			Addr: e.StoreAddr(), ListenAddr: e.StoreListenAddr(), IsServer: e.IsStoreHost(),
			Secret: e.Secret, Timeout: opts.Timeout, Logger: logger,
		})
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous at %s: %w", e.Rank, e.StoreAddr(), err)
		}
		m.store, m.closer = st, st
	}
	opts.Rank, opts.Size, opts.Secret = e.Rank, e.WorldSize, e.Secret
	if opts.Logger == nil {
		opts.Logger = logger
	}
	g, err := tcp.New(ctx, m.store, opts)
	if err != nil {
		m.closer.Close()
		return nil, fmt.Errorf("rank %d: joining the process group: %w", e.Rank, err)
	}
	m.Group = g
	return m, nil
}

// AgentPrefix is where goddp keeps its keys on torchrun's agent store:
// "goddp/RUN_ID/RESTART_COUNT", so that each restart of the workers
// (TORCHELASTIC_RESTART_COUNT) meets afresh, and neither torch's keys nor
// another run's collide with goddp's.
func AgentPrefix(e env.Config) string {
	run := e.RunID
	if run == "" {
		run = "none" // torchrun's default --rdzv-id
	}
	return "goddp/" + run + "/" + strconv.Itoa(e.RestartCount)
}
