package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// inFlight issues count collectives of mixed kinds and sizes on every
// rank, in the same order everywhere, before waiting for any of them.
func inFlight(t *testing.T, w *world, count int) {
	trials := make([]trial, count)
	for i := range trials {
		trials[i] = mixedTrial(w, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) []pg.Work {
		ws := make([]pg.Work, count)
		for i, tr := range trials {
			ws[i] = tr.issue(ctx, r, g)
		}
		return ws
	})
	ok := true
	for i, tr := range trials {
		what := fmt.Sprintf("%s (#%d of %d in flight)", tr.what, i, count)
		for r, err := range w.wait(t, what, column(works, i)) {
			if err != nil {
				t.Errorf("%s: rank %d: %v", what, r, err)
				ok = false
			}
		}
	}
	if !ok {
		return
	}
	for _, tr := range trials {
		tr.verify(t)
	}
}

// column returns works[r][i] for every rank r.
func column(works [][]pg.Work, i int) []pg.Work {
	col := make([]pg.Work, len(works))
	for r, ws := range works {
		col[r] = ws[i]
	}
	return col
}

// mixedTrial is collective i of the in-flight mix.
func mixedTrial(w *world, i int) trial {
	switch i % 6 {
	case 0:
		return allReduceTrial(w, pg.Float32, pg.Op(pg.Sum), 1<<16+i, uint64(i))
	case 1:
		return broadcastTrial(w, pg.Float64, i%w.n, 777*i)
	case 2:
		return allGatherTrial(w, pg.Int32, 100*i+3)
	case 3:
		return reduceScatterTrial(w, pg.BFloat16, pg.Op(pg.Avg), 50*i, uint64(i))
	case 4:
		return allReduceTrial(w, pg.Int64, pg.Op(pg.Bxor), 3000*i+1, uint64(i))
	}
	return barrierTrial(w)
}
