package desync

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// A rank that stalls inside a subgroup fails that subgroup, naming it by
// its subgroup rank, on every other member; the parent is untouched.
func TestStallInSubgroup(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	gs := world(t, 4, 300*time.Millisecond, Options{DiagnosisTimeout: 2 * time.Second}, shared(hs))
	if _, ok := gs[0].Inner().(pg.Splitter); !ok {
		t.Skip("the local backend has no NewGroup yet")
	}
	ctx := context.Background()
	subs := make([]pg.ProcessGroup, 4)
	errs := onRanks(gs, []int{0, 1, 2, 3}, func(g *Group) (err error) {
		subs[g.Rank()], err = g.NewGroup(ctx, []int{1, 2, 3})
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.Close()
			}
		}
	}()
	if subs[0] != nil {
		t.Fatal("rank 0 got a subgroup it is not in")
	}
	for _, r := range []int{1, 2, 3} {
		sg, ok := subs[r].(*Group)
		if !ok || sg.opts.Name != "world/1" || sg.Rank() != r-1 || sg.Size() != 3 {
			t.Fatalf("rank %d's subgroup: %T %+v", r, subs[r], subs[r])
		}
	}
	// Global rank 3 (subgroup rank 2) stalls in the subgroup's first collective.
	errs = onRanks(gs, []int{1, 2}, func(g *Group) error {
		return subs[g.Rank()].AllReduce(ctx, pg.Float32s(make([]float32, 8)), pg.Op(pg.Sum)).Wait(ctx)
	})
	for _, r := range []int{1, 2} {
		se := stallOf(t, r-1, errs[r])
		if !slices.Equal(se.Behind, []int{2}) || se.Seq != 1 || !strings.Contains(errs[r].Error(), "rank 2 is behind") {
			t.Fatalf("global rank %d: %v", r, errs[r])
		}
	}
	// The parent still works, on every rank.
	if errs := onRanks(gs, []int{0, 1, 2, 3}, allReduce(8)); errors.Join(errs...) != nil {
		t.Fatalf("the parent failed after its subgroup did: %v", errs)
	}
}
