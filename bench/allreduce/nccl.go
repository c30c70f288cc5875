package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/internal/wiring/cli"
	"github.com/goddp/ddp/pg/env"
)

// runNCCLWorker is one rank of --backend nccl: it joins the job through
// ddp.InitProcessGroup (rank 0's TCPStore) and measures an NCCL process
// group on GPU LOCAL_RANK.
// Host tensors are staged through pinned memory (pg/nccl), so the figures
// include the host-device copies a CPU-side model pays.
func runNCCLWorker(ctx context.Context, o options, cfg env.Config) error {
	g, err := ddp.InitProcessGroup(ctx,
		ddp.InitOptions{Backend: "nccl", Env: &cfg, Lookup: os.LookupEnv, Timeout: o.job.Timeout})
	if errors.Is(err, ddp.ErrBackendUnavailable) {
		return cli.Usage(fmt.Errorf("--backend nccl: %w", err))
	}
	if err != nil {
		return err
	}
	defer g.Close()
	_, err = measure(ctx, g, o.cfg, os.Stdout)
	return err
}
