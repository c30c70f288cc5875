package nccl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// MonitoredBarrier is c10d's monitored_barrier, which NCCL lacks (c10d
// runs it on Gloo): it goes through the store. Every rank sets its
// arrival key; rank 0 waits for all of them up to timeout and publishes
// the verdict, which the other ranks wait for. Rank 0 fails with a
// *pg.MissingRanksError naming the ranks that did not arrive (the first
// only, unless waitAll); the others with one naming rank 0 if the verdict
// does not come.
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	if err := backend.CheckContext(ctx); err != nil {
		return &pg.CollectiveError{Op: "monitored_barrier", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: err}
	}
	if g.st == nil {
		return &pg.CollectiveError{Op: "monitored_barrier", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: errors.New("this group has no store")}
	}
	g.mu.Lock()
	if err := g.failedLocked(); err != nil {
		g.mu.Unlock()
		return err
	}
	g.mbRounds++
	base := fmt.Sprintf("%s/monitored/%d", g.storeKey, g.mbRounds)
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := g.st.Set(ctx, base+"/"+strconv.Itoa(g.rank), []byte{1}); err != nil {
		return &pg.CollectiveError{Op: "monitored_barrier", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrComm, Err: err}
	}
	if g.rank != 0 {
		// Rank 0 publishes its verdict when the timeout has passed; wait a
		// little longer for it.
		vctx, vcancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+verdictGrace)
		defer vcancel()
		v, err := g.st.Get(vctx, base+"/verdict")
		if err != nil {
			return &pg.MissingRanksError{Rank: g.rank, Missing: []int{0}, Timeout: timeout.String()}
		}
		if missing := parseRanks(string(v)); len(missing) > 0 {
			return &pg.MissingRanksError{Rank: g.rank, Missing: missing, Timeout: timeout.String()}
		}
		return nil
	}
	var missing []int
	for r := 1; r < g.size; r++ {
		wctx := ctx
		if ctx.Err() != nil { // the timeout has passed: only look
			c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			wctx = c
		}
		if err := g.st.Wait(wctx, base+"/"+strconv.Itoa(r)); err != nil {
			missing = append(missing, r)
			if !waitAll {
				break
			}
		}
	}
	verdict := []byte("ok")
	var merr error
	if len(missing) > 0 {
		merr = &pg.MissingRanksError{Rank: g.rank, Missing: missing, Timeout: timeout.String()}
		verdict = []byte(formatRanks(missing))
	}
	setCtx, c2 := context.WithTimeout(context.Background(), time.Second)
	defer c2()
	_ = g.st.Set(setCtx, base+"/verdict", verdict)
	return merr
}

// verdictGrace is how much longer than the timeout the other ranks wait
// for rank 0's verdict.
const verdictGrace = 5 * time.Second

func formatRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

func parseRanks(s string) []int {
	if s == "ok" || s == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if r, err := strconv.Atoi(f); err == nil {
			out = append(out, r)
		}
	}
	return out
}
