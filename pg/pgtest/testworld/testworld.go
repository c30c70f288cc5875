package testworld

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// Timeout is the collective timeout of every world started here.
const Timeout = 10 * time.Second

// Local starts n in-process ranks of the local backend, closed at cleanup.
func Local(t testing.TB, n int) []*local.Group {
	t.Helper()
	gs, err := local.New(n, local.Options{Timeout: Timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// Groups starts n in-process ranks of a backend, "local" or "tcp", closed
// at cleanup.
func Groups(t testing.TB, backend string, n int) []pg.ProcessGroup {
	t.Helper()
	if backend == "tcp" {
		return TCP(t, n)
	}
	out := make([]pg.ProcessGroup, n)
	for r, g := range Local(t, n) {
		out[r] = g
	}
	return out
}

// tcpSecret is the shared secret of the in-process TCP worlds.
const tcpSecret = "goddp-reducer-test-secret-0123456789"

// TCP starts n ranks of the TCP backend in this process, on loopback,
// meeting through a HashStore, closed at cleanup.
func TCP(t testing.TB, n int) []pg.ProcessGroup {
	t.Helper()
	st := store.NewHashStore(store.HashStoreOptions{Timeout: Timeout})
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	gs := make([]*tcp.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			gs[r], errs[r] = tcp.New(ctx, st, tcp.Options{
				Rank: r, Size: n, Secret: []byte(tcpSecret), ListenAddr: "127.0.0.1:0", Timeout: Timeout,
			})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range gs {
			if g != nil {
				wg.Go(func() { g.Close() }) // a rank's Close says goodbye to the others: close them together
			}
		}
		wg.Wait()
	})
	NoErrors(t, errs)
	out := make([]pg.ProcessGroup, n)
	for r, g := range gs {
		out[r] = g
	}
	return out
}

// OnGroups runs f on every rank at once and returns each rank's error.
func OnGroups[G pg.ProcessGroup](gs []G, f func(rank int, g pg.ProcessGroup) error) []error {
	return Parallel(len(gs), func(r int) error { return f(r, gs[r]) })
}

// Parallel runs f(0), ..., f(n-1) at once and returns their errors.
func Parallel(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// NoErrors fails the test with the first rank's error.
func NoErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Ctx is a context that ends after 30 seconds or with the test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
