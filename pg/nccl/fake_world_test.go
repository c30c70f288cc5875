package nccl

import (
	"testing"
	"time"

	"github.com/goddp/ddp/pg/nccl/internal/fake"
	"github.com/goddp/ddp/pg/store"
)

// fakeWorld makes n ranks of Groups with the given timeout over fake
// backends over one pg/local world, with a shared HashStore for
// MonitoredBarrier and the point-to-point lanes.
func fakeWorld(t testing.TB, n int, timeout time.Duration) ([]*Group, []*fake.Backend) {
	t.Helper()
	gs, bs, cleanup, err := newFakeWorld(n, Options{Timeout: timeout}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return gs, bs
}

// newFakeWorld is fakeWorld with the Groups' options (Rank and Size are
// filled in) and the fake's, as nccltest.NewWorld makes it: the pg/local
// groups outlive the Groups' timeout by a minute, so that the Groups'
// watchdogs fire first, and the watchdogs poll fast.
// The returned function releases the world's pairs; close the Groups
// first.
func newFakeWorld(n int, opts Options, o fake.Options) ([]*Group, []*fake.Backend, func(), error) {
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	opts.PollInterval, opts.AsyncErrorInterval = 100*time.Microsecond, 5*time.Millisecond
	o.Timeout = opts.Timeout + time.Minute
	bs, cleanup, err := fake.NewWorld(n, o)
	if err != nil {
		return nil, nil, nil, err
	}
	st := store.NewHashStore(store.HashStoreOptions{})
	gs := make([]*Group, n)
	for r := range bs {
		opts.Rank, opts.Size = r, n
		if gs[r], err = NewOnBackend(bs[r], st, opts); err != nil {
			return nil, nil, nil, err
		}
	}
	return gs, bs, cleanup, nil
}
