//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestNewStore: every rank joins the store rank 0 hosts, writes its key
// and reads every other rank's, so they all talk to one server.
func TestNewStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := tw.g
	st, err := NewStore(ctx, g, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, "rank/"+strconv.Itoa(g.Rank()), []byte(fmt.Sprint("hello from ", g.Rank()))); err != nil {
		t.Fatal(err)
	}
	for r := range g.Size() {
		v, err := st.Get(ctx, "rank/"+strconv.Itoa(r))
		if err != nil {
			t.Fatalf("rank %d's key: %v", r, err)
		}
		if want := fmt.Sprint("hello from ", r); string(v) != want {
			t.Fatalf("rank %d's key holds %q, want %q", r, v, want)
		}
	}
	if (st.Server() != nil) != (g.Rank() == 0) {
		t.Fatalf("rank %d hosts a server: %v", g.Rank(), st.Server() != nil)
	}
	// Rank 0 closes its server last: every rank must be done reading.
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
