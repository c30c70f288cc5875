package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/tcp"
)

// joinGroup joins the job e describes with the backend --backend names
// (tcp or nccl), through dist.InitProcessGroup: the one path a program of
// one's own takes too. A backend this machine cannot run (no NCCL) is a
// usage error of one line (exit 2).
func joinGroup(ctx context.Context, c config, e env.Config, logger *zap.Logger) (*dist.Group, error) {
	g, err := dist.InitProcessGroup(ctx, dist.Options{
		Backend: c.backend,
		Env:     &e,
		Lookup:  os.LookupEnv, // GODDP_NCCL_LIBRARY and the Python prefixes, for nccl
		Timeout: c.timeout,
		TCP:     tcp.Options{ListenAddr: c.listenAddr, NoSharedMemory: !c.shm},
		Logger:  logger,
	})
	if errors.Is(err, dist.ErrBackendUnavailable) {
		return nil, usageError{fmt.Errorf("--backend %s: %w", c.backend, err)}
	}
	return g, err
}
