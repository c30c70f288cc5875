package pg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

func TestFutureCompletesOnce(t *testing.T) {
	f := pg.NewFuture()
	if f.Err() != nil {
		t.Fatal("an unfinished Future has an error")
	}
	select {
	case <-f.Done():
		t.Fatal("an unfinished Future is done")
	default:
	}
	first := errors.New("first")
	f.Complete(first)
	f.Complete(errors.New("second"))
	if err := f.Wait(context.Background()); err != first || f.Err() != first {
		t.Fatalf("got %v, want the first completion", err)
	}
}

func TestFutureWaitStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := pg.NewFuture().Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
	// A finished Future wins over an ended context.
	if err := pg.Completed(nil).Wait(ctx); err != nil {
		t.Fatalf("got %v from a finished Future", err)
	}
}

func TestWaitAllReturnsFirstErrorInOrder(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	err := pg.WaitAll(context.Background(), pg.Completed(nil), pg.Completed(a), pg.Completed(b))
	if err != a {
		t.Fatalf("got %v, want a", err)
	}
	if err := pg.WaitAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestBackendName(t *testing.T) {
	var g pg.ProcessGroup
	if pg.BackendName(g) != "unknown" {
		t.Error("a group without a Backend method should be unknown")
	}
}
