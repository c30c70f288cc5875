//go:build mpi

package main

import (
	"context"
	"fmt"
	"io"
	"sync"

	"go.uber.org/zap"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/mpi"
)

// runMPI is one rank of a job started by mpirun (or srun --mpi=pmix):
// MPI knows the ranks, so there is no MASTER_ADDR, no store and no
// launcher. The pg/desync wrapper needs a store and is left out: a stalled
// collective fails with pg.ErrTimeout naming its op and sequence number,
// and pg/mpi then aborts the job (MPI_Abort).
func runMPI(ctx context.Context, c config, stdout, stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	ds, err := loadData(c)
	if err != nil {
		return err
	}
	mg, err := ddp.InitProcessGroup(ctx, ddp.InitOptions{Backend: "mpi", Timeout: c.timeout, Logger: logger})
	if err != nil {
		return fmt.Errorf("--backend mpi: %w", err)
	}
	defer mg.Close()
	rank := mg.Rank()
	logger.Info("mpi process group", zap.Int("rank", rank), zap.Int("size", mg.Size()), zap.String("library", mpi.LibraryVersion(mg.Inner().(*mpi.Group))))
	metrics, err := serveMetrics(c, rank, logger)
	if err != nil {
		return err
	}
	defer metrics.Close()
	var g pg.ProcessGroup = mg
	if g, err = instrument.Wrap(g, metrics.registerer()); err != nil {
		return err
	}
	defer g.Close() // the wrapper closes mg; mg.Close after it is a no-op
	// Every rank behind a flight recorder too: flight.go, Note [flight recorder].
	rec, stopFlight, err := wrapFlight(g, c, rank, logger)
	if err != nil {
		return err
	}
	defer stopFlight()
	metrics.dbg.flight.Store(rec) // /debug/flight (debug.go)
	g = rec
	metrics.setReady()

	release, err := setupChecks(ctx, c, g, logger) // outputs.go
	if err != nil {
		return err
	}
	defer release()
	var out io.Writer = io.Discard
	if rank == 0 {
		out = stdout
	}
	t := trainer{c: c, g: g, ds: ds, log: logger, out: out, stderr: stderr, metrics: metrics.m, reg: metrics.registerer(), buildMu: new(sync.Mutex), dbg: metrics.dbg}
	if err := t.run(ctx); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return nil
}
