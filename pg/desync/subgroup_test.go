package desync

import (
	"context"
	"errors"
	"fmt"
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
		if !slices.Equal(se.Behind, []int{2}) || se.Seq != 1 || !strings.HasPrefix(errs[r].Error(), fmt.Sprintf("pg: rank "+
			"2 (parent rank 3) is behind (it has issued no collective; it never entered #1) while rank %d of group world/1 "+
			"waited in allreduce #1", r-1)) {
			t.Fatalf("global rank %d: %v", r, errs[r])
		}
	}
	// The parent still works, on every rank.
	if errs := onRanks(gs, []int{0, 1, 2, 3}, allReduce(8)); errors.Join(errs...) != nil {
		t.Fatalf("the parent failed after its subgroup did: %v", errs)
	}
}

// Split's subgroups name their ranks by parent rank too: color r%2,
// key -r makes {2, 0} and {3, 1}, in that order.
func TestStallInSplit(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	gs := world(t, 4, 300*time.Millisecond, Options{DiagnosisTimeout: 2 * time.Second}, shared(hs))
	if _, ok := gs[0].Inner().(pg.Splitter); !ok {
		t.Skip("the local backend has no Split yet")
	}
	ctx := context.Background()
	subs := make([]pg.ProcessGroup, 4)
	errs := onRanks(gs, []int{0, 1, 2, 3}, func(g *Group) (err error) {
		subs[g.Rank()], err = g.Split(ctx, g.Rank()%2, -g.Rank())
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	for r, want := range []int{1, 1, 0, 0} {
		if sg := subs[r].(*Group); sg.Rank() != want || !slices.Equal(sg.opts.parentRanks, []int{2 + r%2, r % 2}) {
			t.Fatalf("rank %d: subgroup rank %d, parent ranks %v", r, sg.Rank(), sg.opts.parentRanks)
		}
	}
	// Parent rank 0 (subgroup rank 1 of {2, 0}) stalls; parent rank 2 fails naming it.
	err := subs[2].AllReduce(ctx, pg.Float32s(make([]float32, 8)), pg.Op(pg.Sum)).Wait(ctx)
	se := stallOf(t, 0, err)
	if !slices.Equal(se.Culprits(), []int{1}) || !strings.HasPrefix(err.Error(), "pg: rank 1 (parent rank 0) is behind") {
		t.Fatalf("%v", err)
	}
}
