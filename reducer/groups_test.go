package reducer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// groupsOf starts n in-process ranks of a backend, "local" or "tcp",
// closed at cleanup.
func groupsOf(t testing.TB, backend string, n int) []pg.ProcessGroup {
	t.Helper()
	if backend == "tcp" {
		return tcpGroups(t, n)
	}
	out := make([]pg.ProcessGroup, n)
	for r, g := range world(t, n) {
		out[r] = g
	}
	return out
}

// tcpSecret is the shared secret of the in-process TCP worlds.
const tcpSecret = "goddp-reducer-test-secret-0123456789"

// tcpGroups starts n ranks of the TCP backend in this process, on
// loopback, meeting through a HashStore, closed at cleanup.
func tcpGroups(t testing.TB, n int) []pg.ProcessGroup {
	t.Helper()
	st := store.NewHashStore(store.HashStoreOptions{Timeout: 10 * time.Second})
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs := make([]*tcp.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			gs[r], errs[r] = tcp.New(ctx, st, tcp.Options{
				Rank: r, Size: n, Secret: []byte(tcpSecret), ListenAddr: "127.0.0.1:0", Timeout: 10 * time.Second,
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
	noErrors(t, errs)
	out := make([]pg.ProcessGroup, n)
	for r, g := range gs {
		out[r] = g
	}
	return out
}

// onGroups runs f on every rank at once and returns each rank's error.
func onGroups(gs []pg.ProcessGroup, f func(rank int, g pg.ProcessGroup) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(r, g) })
	}
	wg.Wait()
	return errs
}

// parallel runs f(0), ..., f(n-1) at once and returns their errors.
func parallel(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}
