package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/goddp/ddp/internal/wiring/launch"
	"github.com/goddp/ddp/nccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/env"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// member is a worker's place in its job: the process group and the
// rendezvous store it met its peers through (launch.Member for tcp).
type member interface {
	group() pg.ProcessGroup
	Store() store.Store
	StoreHost() int
	Close() error
}

type tcpMember struct{ *launch.Member }

func (m tcpMember) group() pg.ProcessGroup { return m.Group }

// joinGroup joins the job with the backend --backend names: tcp through
// launch.JoinTCP, nccl through joinNCCL.
func joinGroup(ctx context.Context, c config, e env.Config, logger *zap.Logger) (member, error) {
	if c.backend == "nccl" {
		return joinNCCL(ctx, c, e, logger)
	}
	listen, advertise := peerAddrs(c, e)
	m, err := launch.JoinTCP(ctx, e, tcp.Options{ListenAddr: listen, AdvertiseAddr: advertise, Timeout: c.timeout, NoSharedMemory: !c.shm}, logger)
	if err != nil {
		return nil, err
	}
	return tcpMember{m}, nil
}

// ncclMember is a worker's place in an NCCL job.
type ncclMember struct {
	g         *pgnccl.Group
	store     store.Store
	closer    io.Closer
	storeHost int
}

func (m *ncclMember) group() pg.ProcessGroup { return m.g }
func (m *ncclMember) Store() store.Store     { return m.store }
func (m *ncclMember) StoreHost() int         { return m.storeHost }
func (m *ncclMember) Close() error           { return errors.Join(m.g.Close(), m.closer.Close()) }

// loadNCCL loads NCCL and the CUDA driver (launch.LoadNCCL). A failure
// is a usage error of one line (exit 2): this machine cannot run
// --backend nccl as it is set up.
func loadNCCL() (*nccl.Library, *nccl.CUDA, error) {
	lib, cu, err := launch.LoadNCCL(os.Getenv)
	if err != nil {
		return nil, nil, usageError{err}
	}
	return lib, cu, nil
}

// joinNCCL meets the other ranks through the job's store, as the tcp
// backend does (goddp's TCPStore hosted by rank 0, or torchrun's agent
// store under launch.AgentPrefix), and makes the NCCL process group on
// GPU LOCAL_RANK.
func joinNCCL(ctx context.Context, c config, e env.Config, logger *zap.Logger) (*ncclMember, error) {
	lib, cu, err := loadNCCL()
	if err != nil {
		return nil, err
	}
	m := &ncclMember{}
	if e.UseAgentStore {
		cl, err := store.DialC10d(ctx, e.StoreAddr(), store.C10dOptions{Timeout: c.timeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous through torchrun's agent store at %s: %w", e.Rank, e.StoreAddr(), err)
		}
		m.store, m.closer, m.storeHost = store.NewPrefixStore(launch.AgentPrefix(e), cl), cl, pg.NoPeer
	} else {
		st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
			Addr: e.StoreAddr(), ListenAddr: e.StoreListenAddr(), IsServer: e.IsStoreHost(),
			Secret: e.Secret, Timeout: c.timeout, Logger: logger,
		})
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous at %s: %w", e.Rank, e.StoreAddr(), err)
		}
		m.store, m.closer = st, st
	}
	g, err := pgnccl.New(ctx, m.store, pgnccl.Options{Rank: e.Rank, Size: e.WorldSize, Device: e.LocalRank,
		Library: lib, CUDA: cu, Timeout: c.timeout, Logger: logger})
	if err != nil {
		m.closer.Close()
		return nil, fmt.Errorf("rank %d: joining the NCCL process group on GPU %d: %w", e.Rank, e.LocalRank, err)
	}
	logger.Info("nccl process group", zap.Stringer("nccl", lib.Version()), zap.String("library", lib.Path()),
		zap.Int("device", e.LocalRank))
	m.g = g
	return m, nil
}
