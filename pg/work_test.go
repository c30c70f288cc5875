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

// Wait(nil) does not panic: it is refused as an ended context is, and
// still returns the result of a finished collective.
func TestFutureWaitNilContext(t *testing.T) {
	f := pg.NewFuture()
	//lint:ignore SA1012 a nil context is the point of the test
	if err := f.Wait(nil); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("Wait(nil) on a running collective: %v, want ErrInvalidArgument", err)
	}
	boom := errors.New("boom")
	f.Complete(boom)
	//lint:ignore SA1012 a nil context is the point of the test
	if err := f.Wait(nil); err != boom {
		t.Fatalf("Wait(nil) on a finished collective: %v, want its result", err)
	}
}

// CompleteAt's times are the Future's once it is done, and only then;
// Complete leaves them zero; TimesOf reads them through the interface.
func TestFutureTimes(t *testing.T) {
	at := time.Unix(100, 0)
	want := pg.OpTimes{Started: at, Completed: at.Add(time.Second), Duration: time.Millisecond}
	f := pg.NewSeqFuture(1)
	if f.Times() != (pg.OpTimes{}) {
		t.Fatal("an unfinished Future has times")
	}
	f.CompleteAt(nil, want)
	f.CompleteAt(nil, pg.OpTimes{}) // ignored, as a second Complete
	if got := pg.TimesOf(f); got != want {
		t.Fatalf("TimesOf %+v, want %+v", got, want)
	}
	if got := pg.TimesOf(pg.Completed(nil)); got != (pg.OpTimes{}) {
		t.Fatalf("a Future finished by Complete has times %+v", got)
	}
	var w pg.Work = struct{ pg.Work }{f} // a Work that is not a TimedWork
	if got := pg.TimesOf(w); got != (pg.OpTimes{}) {
		t.Fatalf("TimesOf an untimed Work: %+v", got)
	}
}
