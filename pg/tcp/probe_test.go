package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Every rank can probe every other after the rendezvous: the listener
// stays open and answers (Note [probe listener]), still after a failed
// collective, and refuses once the peer has closed. A probe costs the
// peer nothing it would log or count as a peer.
func TestProbePeer(t *testing.T) {
	gs := newGroups(t, 3, 2*time.Second, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for r, g := range gs {
		for p := range gs {
			got := g.ProbePeer(ctx, p)
			want := pg.ReachAnswers
			if p == r {
				want = pg.ReachUnknown // not itself
			}
			if got.Reach != want || (want == pg.ReachAnswers && got.Addr == "") {
				t.Fatalf("rank %d probing rank %d: %+v, want %v", r, p, got, want)
			}
		}
	}
	// The group still works after being probed.
	if err := each(gs, func(_ int, g *Group) error {
		return g.AllReduce(ctx, pg.NewTensor(pg.Float32, 8), pg.Op(pg.Sum)).Wait(ctx)
	}); err[0] != nil || err[1] != nil || err[2] != nil {
		t.Fatalf("allreduce after probes: %v", err)
	}
	gs[2].Close()
	if got := gs[0].ProbePeer(ctx, 2); got.Reach != pg.ReachRefused {
		t.Fatalf("probing rank 2 after its Close: %+v, want refused", got)
	}
	var pr backend.PeerProber
	if !pg.As(gs[1], &pr) || pr.ProbePeer(ctx, 0).Reach != pg.ReachAnswers {
		t.Fatalf("pg.As does not find the prober, or rank 0 does not answer")
	}
	if got := gs[0].ProbePeer(ctx, 7); got.Reach != pg.ReachUnknown {
		t.Fatalf("probing rank 7 of 3: %+v", got)
	}
}
