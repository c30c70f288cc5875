package local

import (
	"context"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// slotsLeft is how many slots the world still holds.
func slotsLeft(w *world) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.slots)
}

func waitAll(t *testing.T, works ...pg.Work) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range works {
		if err := w.Wait(ctx); ctx.Err() != nil {
			t.Fatalf("hung: %v", err)
		}
	}
}

func TestSlotsAreForgotten(t *testing.T) {
	ctx := context.Background()
	groups, err := New(3, Options{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	w := groups[0].w

	// Successful collectives.
	var works []pg.Work
	for range 20 {
		for _, g := range groups {
			works = append(works, g.AllReduce(ctx, pg.NewTensor(pg.Float32, 10), pg.Op(pg.Sum)))
		}
	}
	waitAll(t, works...)
	if n := slotsLeft(w); n != 0 {
		t.Fatalf("%d slots left after successful collectives", n)
	}

	// A timeout, and then the late rank.
	waitAll(t, groups[0].Barrier(ctx), groups[1].Barrier(ctx))
	if n := slotsLeft(w); n != 1 {
		t.Fatalf("%d slots left while rank 2 has yet to come; want 1", n)
	}
	waitAll(t, groups[2].Barrier(ctx))
	if n := slotsLeft(w); n != 0 {
		t.Fatalf("%d slots left after the late rank came", n)
	}

	// A rank that closes never comes: its peers' failed slots are dropped.
	if err := groups[2].Close(); err != nil {
		t.Fatal(err)
	}
	waitAll(t, groups[0].Barrier(ctx), groups[1].Barrier(ctx))
	if n := slotsLeft(w); n != 0 {
		t.Fatalf("%d slots left after a closed rank's peers failed", n)
	}
}
