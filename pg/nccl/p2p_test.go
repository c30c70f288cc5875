package nccl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// TestPointToPointLanes: ranks 0 and 2 of a world of 3 both send 64 KiB to
// each other before either receives (the fake's sends, like NCCL's large
// ones, wait for the receive: on one shared stream this deadlocked), with
// an allreduce issued at a different point among them on each rank. Each
// direction has its own lane, so all of it completes; one pair
// communicator is made per direction used.
func TestPointToPointLanes(t *testing.T) {
	gs, bs := fakeWorld(t, 3, 10*time.Second)
	defer closeAll(t, gs)
	ctx := context.Background()
	const n = 1 << 14
	msg := func(from int) []float32 { return seqFloats(n, float32(1000*from)) }
	got := map[int][]float32{0: make([]float32, n), 2: make([]float32, n)}
	sum := map[int][]float32{}
	var works []pg.Work
	for _, r := range []int{0, 2} {
		peer := 2 - r
		sum[r] = []float32{float32(r)}
		ws := []pg.Work{gs[r].Send(ctx, pg.Float32s(msg(r)), peer, 7)}
		if r == 2 { // the allreduce before the receive on rank 2, after it on rank 0
			ws = append(ws, gs[r].AllReduce(ctx, pg.Float32s(sum[r]), pg.Op(pg.Sum)))
		}
		ws = append(ws, gs[r].Recv(ctx, pg.Float32s(got[r]), peer, 9))
		if r == 0 {
			ws = append(ws, gs[r].AllReduce(ctx, pg.Float32s(sum[r]), pg.Op(pg.Sum)))
		}
		works = append(works, ws...)
	}
	sum[1] = []float32{1}
	works = append(works, gs[1].AllReduce(ctx, pg.Float32s(sum[1]), pg.Op(pg.Sum)))
	for i, w := range works {
		if err := waitErr(t, w, 10*time.Second); err != nil {
			t.Fatalf("work %d: %v", i, err)
		}
	}
	for _, r := range []int{0, 2} {
		want := msg(2 - r)
		for i := range want {
			if got[r][i] != want[i] {
				t.Fatalf("rank %d received [%d] = %v, want %v", r, i, got[r][i], want[i])
			}
		}
		if sum[r][0] != 3 {
			t.Errorf("rank %d: allreduce = %v, want 3", r, sum[r][0])
		}
	}
	if made := bs[0].PairsMade(); made != 4 {
		t.Errorf("%d pair communicator ends made, want 4 (0->2 and 2->0, two ranks each)", made)
	}
}

// TestPointToPointSizeMismatch: a Send of 32 bytes against a Recv of 28
// fails with pg.ErrInvalidArgument on both sides, naming both sizes, and
// the lane goes on: the next matching pair succeeds.
func TestPointToPointSizeMismatch(t *testing.T) {
	gs, _ := fakeWorld(t, 2, 10*time.Second)
	defer closeAll(t, gs)
	ctx := context.Background()
	s := gs[0].Send(ctx, pg.NewTensor(pg.Float32, 8), 1, 0)
	r := gs[1].Recv(ctx, pg.NewTensor(pg.Float32, 7), 0, 0)
	for i, w := range []pg.Work{s, r} {
		err := waitErr(t, w, 10*time.Second)
		if !errors.Is(err, pg.ErrInvalidArgument) || !containsAll(err.Error(), "32 bytes", "receives 28") {
			t.Errorf("rank %d: got %v, want pg.ErrInvalidArgument naming 32 and 28 bytes", i, err)
		}
	}
	out := make([]float32, 3)
	s = gs[0].Send(ctx, pg.Float32s([]float32{1, 2, 3}), 1, 0)
	r = gs[1].Recv(ctx, pg.Float32s(out), 0, 0)
	for i, w := range []pg.Work{s, r} {
		if err := waitErr(t, w, 10*time.Second); err != nil {
			t.Fatalf("after the mismatch, rank %d: %v", i, err)
		}
	}
	if fmt.Sprint(out) != "[1 2 3]" {
		t.Errorf("after the mismatch, received %v, want [1 2 3]", out)
	}
	if s.Seq() != 2 || r.Seq() != 2 {
		t.Errorf("Seqs %d and %d, want 2 (the refused pair counts)", s.Seq(), r.Seq())
	}
}

// TestRecvFromDepartedRank: rank 1 closes without ever sending; rank 0's
// Recv from it fails at once (through the departure key in the store),
// naming rank 1, not after the group timeout.
func TestRecvFromDepartedRank(t *testing.T) {
	gs, _ := fakeWorld(t, 2, time.Minute)
	defer closeAll(t, gs)
	if err := gs[1].Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := waitErr(t, gs[0].Recv(context.Background(), pg.NewTensor(pg.Int64, 3), 1, 0), 10*time.Second)
	var ce *pg.CollectiveError
	if !errors.As(err, &ce) || ce.Peer != 1 || !errors.Is(err, pg.ErrRemote) {
		t.Errorf("got %v, want a pg.ErrRemote CollectiveError naming peer 1", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
