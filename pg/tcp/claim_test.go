package tcp

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// TestDuplicateRankFailsEveryRank: ranks 0, 1 and 1 of a group of 3. The
// second rank 1 fails at once; rank 0 and the first rank 1 fail as soon
// as it does instead of timing out, and all three errors name rank 1 and
// both processes that claimed it.
func TestDuplicateRankFailsEveryRank(t *testing.T) {
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ranks := []int{0, 1, 1}
	errs := make([]error, len(ranks))
	took := make([]time.Duration, len(ranks))
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range ranks {
		wg.Go(func() {
			g, err := New(ctx, st, Options{Rank: r, Size: 3, Secret: testSecret, ListenAddr: "127.0.0.1:0"})
			if err == nil {
				g.Close()
			}
			errs[i], took[i] = err, time.Since(start)
		})
		time.Sleep(50 * time.Millisecond) // the first rank 1 claims first
	}
	wg.Wait()
	var claimed []string
	for i, err := range errs {
		var dup *DuplicateRankError
		var ce *pg.CollectiveError
		switch {
		case !errors.As(err, &dup) || !errors.Is(err, ErrDuplicateRank) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!errors.As(err, &ce):
			t.Fatalf("process %d (rank %d): %v; want a *DuplicateRankError in a *pg.CollectiveError", i, ranks[i], err)
		case dup.Rank != 1 || !strings.Contains(err.Error(), "rank 1 is claimed by two processes"):
			t.Errorf("process %d (rank %d): %v; want it to name rank 1", i, ranks[i], err)
		case took[i] > 5*time.Second:
			t.Errorf("process %d (rank %d) failed after %v", i, ranks[i], took[i])
		}
		claimed = append(claimed, dup.First+" | "+dup.Second)
	}
	if claimed[0] != claimed[1] || claimed[1] != claimed[2] {
		t.Errorf("the processes disagree on who claimed rank 1: %q", claimed)
	}
	var dup *DuplicateRankError
	errors.As(errs[2], &dup)
	if dup.First == dup.Second || !strings.Contains(dup.First, "listening on 127.0.0.1:") ||
		!strings.Contains(dup.Second, "listening on 127.0.0.1:") {
		t.Errorf("the claims do not tell the processes apart: %q and %q", dup.First, dup.Second)
	}
	t.Logf("errors after %v: %v", took, errs[0])
}
