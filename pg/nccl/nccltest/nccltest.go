package nccltest

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/nccl/internal/fake"
	"github.com/goddp/ddp/pg/store"
)

// Options configure NewWorld.
type Options struct {
	// Timeout is the Groups' timeout; zero means one minute.
	Timeout time.Duration
	// Version is the NCCL version the double reports (zero: 2.28.0), and
	// NoMemAlloc, NoRegister and NoWindows remove the symbols of its
	// memory and registration APIs, as an older or stripped library
	// would.
	Version                           libnccl.Version
	NoMemAlloc, NoRegister, NoWindows bool
	// BucketRegistration and Logger are passed to the Groups' Options.
	BucketRegistration pgnccl.Registration
	Logger             *zap.Logger
	// EnableTiming is passed to the Groups' Options: timing events
	// around each collective, for pg/flight's duration_ms.
	EnableTiming bool
}

// World is n ranks of NCCL Groups over the test double.
type World struct {
	// Groups are the ranks' Groups, in rank order.
	Groups []*pgnccl.Group

	backends []*fake.Backend
	release  func()
}

// NewWorld makes n ranks of Groups over the binding's test double. Close
// the World when done.
func NewWorld(n int, o Options) (*World, error) {
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	// The pg/local groups that carry out the NCCL calls outlive the
	// Groups' timeout, so that a Group's watchdog fires first, as NCCL's.
	bs, release, err := fake.NewWorld(n, fake.Options{Timeout: o.Timeout + time.Minute, Version: o.Version,
		NoMemAlloc: o.NoMemAlloc, NoRegister: o.NoRegister, NoWindows: o.NoWindows})
	if err != nil {
		return nil, err
	}
	w := &World{Groups: make([]*pgnccl.Group, n), backends: bs, release: release}
	st := store.NewHashStore(store.HashStoreOptions{})
	for r := range bs {
		// Fast polling: tests of timeouts and asynchronous errors should
		// not wait on the watchdog's production intervals.
		opts := pgnccl.Options{Rank: r, Size: n, Timeout: o.Timeout, PollInterval: 100 * time.Microsecond,
			AsyncErrorInterval: 5 * time.Millisecond, BucketRegistration: o.BucketRegistration, Logger: o.Logger,
			EnableTiming: o.EnableTiming}
		if w.Groups[r], err = pgnccl.NewOnBackend(bs[r], st, opts); err != nil {
			w.Groups = w.Groups[:r]
			return nil, errors.Join(err, w.Close())
		}
	}
	return w, nil
}

// ProcessGroups is Groups as pg.ProcessGroups.
func (w *World) ProcessGroups() []pg.ProcessGroup {
	out := make([]pg.ProcessGroup, len(w.Groups))
	for r, g := range w.Groups {
		out[r] = g
	}
	return out
}

// Registrations is how many NCCL registrations and windows rank's Group
// holds now (not yet deregistered), and how many it has made in all.
func (w *World) Registrations(rank int) (live, made int) {
	b := w.backends[rank]
	return b.Live(), b.Made()
}

// Trace is the device-side calls of rank's Group in the order they ran:
// "h2d", "d2h", "d2d" and "event" on the copy stream, "wait"/"waited"
// around a collective stream's wait for an upload, "allReduce", and the
// allocation and registration calls.
func (w *World) Trace(rank int) []string { return w.backends[rank].Trace() }

// Close closes every Group, together (a Group's Close waits for its
// stream, which may wait for its peers), then releases what the world
// made beyond them. Closing a Group before is allowed.
func (w *World) Close() error {
	errs := make([]error, len(w.Groups))
	var wg sync.WaitGroup
	for r, g := range w.Groups {
		wg.Go(func() { errs[r] = g.Close() })
	}
	wg.Wait()
	w.release()
	return errors.Join(errs...)
}
