package pg_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestCollectiveErrorMatchesKindAndCause(t *testing.T) {
	err := error(&pg.CollectiveError{Op: "allreduce", Rank: 1, Peer: 3, Kind: pg.ErrComm, Err: io.EOF})
	if !errors.Is(err, pg.ErrComm) || !errors.Is(err, io.EOF) || errors.Is(err, pg.ErrTimeout) {
		t.Errorf("errors.Is: %v should match ErrComm and io.EOF only", err)
	}
	var ce *pg.CollectiveError
	if !errors.As(err, &ce) || ce.Peer != 3 {
		t.Errorf("errors.As: got %+v", ce)
	}
	want := "pg: allreduce on rank 1 with peer rank 3: communication error: EOF"
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	noPeer := &pg.CollectiveError{Op: "barrier", Rank: 0, Peer: pg.NoPeer, Kind: pg.ErrClosed}
	if got := noPeer.Error(); got != "pg: barrier on rank 0: process group closed" {
		t.Errorf("message without peer or cause: %q", got)
	}
}

func TestMissingRanksErrorIsATimeout(t *testing.T) {
	err := error(&pg.MissingRanksError{Rank: 0, Missing: []int{2, 5}, Timeout: "1s"})
	if !errors.Is(err, pg.ErrTimeout) {
		t.Error("a MissingRanksError should be a timeout")
	}
	if !strings.Contains(err.Error(), "ranks [2 5]") || !strings.Contains(err.Error(), "1s") {
		t.Errorf("message %q should name the ranks and the timeout", err)
	}
}
