//go:build mpi

package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/desync"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/mpi"
)

// mpiAbortAfterDiagnosis is how long after pg/desync's diagnosis may end
// MPI_Abort comes, so that every rank has printed its error naming the
// culprit before mpirun ends the job.
const mpiAbortAfterDiagnosis = 2 * time.Second

// runMPI is one rank of a job started by mpirun (or srun --mpi=pmix):
// MPI knows the ranks, so there is no MASTER_ADDR and no launcher of
// ours. The group still gets a store (hosted by rank 0, found over MPI),
// so pg/desync names a stalled or dead rank as it does over tcp; pg/mpi's
// MPI_Abort, which ends the job, waits for that diagnosis (mpiAbortGrace).
func runMPI(ctx context.Context, c config, stdout, stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	// Note [memory follows the work]; one process counted (MPI says nothing of its neighbours here)
	ds, err := loadChecked(c, 1, 1, logger)
	if err != nil {
		return err
	}
	dopts := desyncOptions(c, 0, logger)
	mg, err := dist.InitProcessGroup(ctx, dist.Options{Backend: "mpi", Timeout: c.timeout, Logger: logger,
		MPIAbortGrace: dopts.DiagnosisTimeout + mpiAbortAfterDiagnosis})
	if err != nil {
		return fmt.Errorf("--backend mpi: %w", err)
	}
	defer mg.Close()
	// Before any wrapper issues a collective: Note [every rank runs the same job] (agree.go).
	if err := agreeSettings(ctx, mg.Inner(), jobSettings(c.flagValues, c.checkpointDir != "", ds)); err != nil {
		return err
	}
	rank := mg.Rank()
	logger.Info("mpi process group", zap.Int("rank", rank), zap.Int("size", mg.Size()),
		zap.String("library", mpi.LibraryVersion(mg.Inner().(*mpi.Group))))
	metrics, err := serveMetrics(c, rank, logger)
	if err != nil {
		return err
	}
	defer metrics.Close()
	// Named failures, as over tcp: a stalled or dead rank is named by every rank.
	dg, err := desync.Wrap(mg.Inner(), mg.Store(), desyncOptions(c, mg.StoreHost(), logger))
	if err != nil {
		return err
	}
	defer dg.Close() // after the instrument wrapper's Close, which closes it first
	var g pg.ProcessGroup = dg
	if g, err = instrument.Wrap(g, metrics.registerer()); err != nil {
		return err
	}
	defer g.Close() // the wrappers close mg's MPI group; mg.Close then closes the store
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
	t := trainer{c: c, g: g, ds: ds, log: logger, out: out, stderr: stderr, metrics: metrics.m, reg: metrics.registerer(),
		buildMu: new(sync.Mutex), dbg: metrics.dbg}
	if err := t.run(ctx); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return nil
}
