package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/desync"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
	"go.uber.org/zap"
)

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || errors.Is(err, dataset.ErrBadInput) || errors.Is(err, model.ErrBadInit) ||
		errors.Is(err, model.ErrBadSpec) || errors.Is(err, checkpoint.ErrIncompatible) ||
		errors.Is(err, checkpoint.ErrBadCheckpoint) ||
		isBadRendezvous(err)
}

// runWorker is one rank of a multi-process job: rendezvous through the
// TCP store (hosted by rank 0), or through torchrun's agent store when
// TORCHELASTIC_USE_AGENT_STORE=True, join the TCP process group, train.
func runWorker(ctx context.Context, c config, e env.Config, stdout, stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	var ds *dataset.Dataset
	if c.ownLauncher { // which checked the memory of the whole job
		ds, err = loadData(c)
	} else {
		ds, err = loadChecked(c, 1, max(e.LocalWorldSize, 1), logger) // the machine's workers share its memory
	}
	if err != nil {
		return err
	}
	metrics, err := serveMetrics(c, e.Rank, logger) // /healthz now, /readyz once the group has formed
	if err != nil {
		return err
	}
	defer metrics.Close()
	if !c.ownLauncher { // ddp-train's own launcher checked it for all its workers
		if err := checkListenAddr(c.listenAddr, 1); err != nil { // flagrules.go
			return err
		}
	}
	setup, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m, err := joinGroup(setup, c, e, logger) // tcp, or nccl (nccl.go)
	if err != nil {
		return listenFailure(c, err) // a port taken since checkListenAddr: exit 2
	}
	defer m.Close()
	// Before any wrapper issues a collective: Note [every rank runs the same job] (agree.go).
	if err := agreeSettings(setup, m.Inner(), jobSettings(c.flagValues, c.checkpointDir != "", ds)); err != nil {
		return err
	}
	// Named failures: a stalled or dead rank is named by every rank
	// (pg/desync), with --debug-collectives the fingerprint check.
	dg, err := desync.Wrap(m.Inner(), m.Store(), desyncOptions(c, m.StoreHost(), logger))
	if err != nil {
		return err
	}
	defer dg.Close() // after the instrument wrapper's Close, which closes it first
	var g pg.ProcessGroup = dg
	if g, err = instrument.Wrap(g, metrics.registerer()); err != nil { // ddp_collective_seconds
		return err
	}
	defer g.Close() // before m.Close: it stops the wrapper's watcher
	// The last 2000 collectives, dumped on failure and SIGUSR1 (flight.go).
	rec, stopFlight, err := wrapFlight(g, c, e.Rank, logger)
	if err != nil {
		return err
	}
	defer stopFlight()
	metrics.dbg.flight.Store(rec) // /debug/flight (debug.go)
	g = rec                       // closed through the g.Close above: the recorder holds nothing
	metrics.setReady()

	if !c.ownLauncher { // ddp-train's own launcher checked and holds these
		release, err := setupChecks(ctx, c, g, logger)
		if err != nil {
			return err
		}
		defer release()
	}
	var out io.Writer = io.Discard
	if e.Rank == 0 {
		out = stdout
	}
	t := trainer{c: c, g: g, ds: ds, log: logger, out: out, stderr: stderr, metrics: metrics.m, reg: metrics.registerer(),
		buildMu: new(sync.Mutex), dbg: metrics.dbg}
	if err := t.run(ctx); err != nil {
		writeReport(os.Getenv(reportDirEnv), metrics.dbg, err) // debug.go
		return fmt.Errorf("rank %d: %w", e.Rank, err)
	}
	return nil
}

// runLocal trains nproc replicas as goroutines over the in-process backend.
func runLocal(ctx context.Context, c config, stdout, stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	ds, err := loadChecked(c, c.nproc, 1, logger) // Note [memory follows the work]
	if err != nil {
		return err
	}
	if err := checkInit(c, ds.Info()); err != nil {
		return err
	}
	groups, err := local.New(c.nproc, local.Options{Timeout: c.timeout})
	if err != nil {
		return err
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	if err := checkOutputs(c, true); err != nil { // Note [outputs only on success]
		return err
	}
	release, err := claimCheckpoint(c, logger) // Note [checkpoint directories are owned]
	if err != nil {
		return err
	}
	defer release()
	diagStore := store.NewHashStore(store.HashStoreOptions{Timeout: c.timeout}) // the ranks' desync reports
	defer diagStore.Close()
	metrics, err := serveMetrics(c, 0, logger)
	if err != nil {
		return err
	}
	defer metrics.Close()
	metrics.setReady()     // the goroutine ranks' groups exist
	var buildMu sync.Mutex // Gorgonia's graph building is not safe in parallel
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, lg := range groups {
		dg, err := desync.Wrap(lg, diagStore, desyncOptions(c, pg.NoPeer, logger))
		if err != nil {
			return err
		}
		defer dg.Close()
		g, err := instrument.Wrap(dg, metrics.registerer()) // every rank's series, told apart by their rank label
		if err != nil {
			return err
		}
		defer g.Close()
		rec, stopFlight, err := wrapFlight(g, c, r, logger) // flight.go: Note [flight recorder]
		if err != nil {
			return err
		}
		defer stopFlight()
		t := trainer{c: c, g: rec, ds: ds, log: logger, out: io.Discard, stderr: stderr, reg: metrics.registerer(),
			buildMu: &buildMu}
		if r == 0 {
			t.out, t.metrics, t.dbg = stdout, metrics.m, metrics.dbg
			metrics.dbg.flight.Store(rec)
		}
		wg.Go(func() {
			if errs[r] = t.run(ctx); errs[r] != nil {
				groups[r].Abort(errs[r]) // the others fail at once instead of timing out
			}
		})
	}
	wg.Wait()
	return localError(errs)
}

// localError is the goroutine ranks' error: the first that is not a
// peer's failure seen from here (pg.ErrRemote), else the first.
func localError(errs []error) error {
	for r, err := range errs {
		if err != nil && !errors.Is(err, pg.ErrRemote) {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// desyncOptions configures the pg/desync wrapper of every rank's group:
// storeHost is the rank hosting the store (pg.NoPeer for in-memory).
func desyncOptions(c config, storeHost int, logger *zap.Logger) desync.Options {
	return desync.Options{
		CheckCollectives: c.debugColls,
		DiagnosisTimeout: min(desync.DefaultDiagnosisTimeout, c.timeout),
		StoreHost:        storeHost,
		Logger:           logger,
	}
}

// loadData returns the dataset the flags name, or the synthetic one.
func loadData(c config) (*dataset.Dataset, error) {
	if c.data == "" {
		return dataset.Synthetic(uint64(c.seed), c.samples), nil
	}
	return dataset.Load(c.data, c.labels, c.classes)
}
