package main

import (
	"context"
	"fmt"
	"os"

	"github.com/goddp/ddp/internal/wiring/cli"
	"github.com/goddp/ddp/internal/wiring/launch"
	"github.com/goddp/ddp/pg/env"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/store"
)

// runNCCLWorker is one rank of --backend nccl: it meets the others through
// rank 0's TCPStore and measures an NCCL process group on GPU LOCAL_RANK.
// Host tensors are staged through pinned memory (pg/nccl), so the figures
// include the host-device copies a CPU-side model pays.
func runNCCLWorker(ctx context.Context, o options, cfg env.Config) error {
	lib, cu, err := launch.LoadNCCL(os.Getenv)
	if err != nil {
		return cli.Usage(err)
	}
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: cfg.StoreAddr(), ListenAddr: cfg.StoreListenAddr(),
		IsServer: cfg.IsStoreHost(), Secret: cfg.Secret, Timeout: o.job.Timeout})
	if err != nil {
		return fmt.Errorf("rank %d: rendezvous at %s: %w", cfg.Rank, cfg.StoreAddr(), err)
	}
	defer st.Close()
	g, err := pgnccl.New(ctx, st, pgnccl.Options{Rank: cfg.Rank, Size: cfg.WorldSize, Device: cfg.LocalRank,
		Library: lib, CUDA: cu, Timeout: o.job.Timeout})
	if err != nil {
		return fmt.Errorf("rank %d: NCCL %v on GPU %d: %w", cfg.Rank, lib.Version(), cfg.LocalRank, err)
	}
	defer g.Close()
	_, err = measure(ctx, g, o.cfg, os.Stdout)
	return err
}
