package pgtest

import (
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
	w.tryAll(t, trials)
}

// column returns works[r][i] for every rank r.
func column(works [][]pg.Work, i int) []pg.Work {
	col := make([]pg.Work, len(works))
	for r, ws := range works {
		if ws != nil { // nil for ranks held by other processes
			col[r] = ws[i]
		}
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
