package tcp

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

func TestMain(m *testing.M) {
	if workerMain() {
		return
	}
	if spec := os.Getenv(netbedWorkerEnv); spec != "" {
		os.Exit(runNetbedWorker(spec))
	}
	goleak.VerifyTestMain(m)
}

// testSecret is the shared secret of the in-process test worlds.
var testSecret = []byte("goddp-tcp-test-secret-0123456789")

// newGroups starts n ranks in this process, on loopback, rendezvousing
// through a HashStore, and closes them when t ends. tweak, if not nil,
// adjusts each rank's options.
func newGroups(t testing.TB, n int, timeout time.Duration, tweak func(*Options)) []*Group {
	t.Helper()
	st := store.NewHashStore(store.HashStoreOptions{Timeout: 30 * time.Second})
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			o := Options{Rank: i, Size: n, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: timeout}
			if tweak != nil {
				tweak(&o)
			}
			gs[i], errs[i] = New(ctx, st, o)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		if !closeGroupsWithin(gs, closeBound) {
			t.Errorf("Close did not return within %v on every rank: hung", closeBound)
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: New: %v", i, err)
		}
	}
	return gs
}

func closeGroups(gs []*Group) {
	var wg sync.WaitGroup
	for _, g := range gs {
		if g != nil {
			wg.Go(func() { g.Close() })
		}
	}
	wg.Wait()
}

// closeBound is how long the test worlds' cleanup waits for Close: a
// hung Close fails the test rather than hang it.
const closeBound = time.Minute

// closeGroupsWithin is closeGroups, giving up after d; it reports whether
// every Close returned.
func closeGroupsWithin(gs []*Group, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		closeGroups(gs)
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// world is the pgtest.World of this backend.
func world(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
	gs := newGroups(t, n, timeout, nil)
	out := make([]pg.ProcessGroup, n)
	for i, g := range gs {
		out[i] = g
	}
	return out
}

// each runs f on every rank at once and returns the errors by rank.
func each(gs []*Group, f func(r int, g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(r, g) })
	}
	wg.Wait()
	return errs
}
