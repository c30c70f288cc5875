package desync_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/desync"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
)

// Two ranks in one process; rank 1 never issues the allreduce, so rank
// 0's times out, and the error says who is to blame.
func ExampleWrap() {
	inner, _ := local.New(2, local.Options{Timeout: 100 * time.Millisecond})
	st := store.NewHashStore(store.HashStoreOptions{}) // shared by the ranks: a TCPStore across processes
	defer st.Close()
	var gs []*desync.Group
	for _, g := range inner {
		w, err := desync.Wrap(g, st, desync.Options{StoreHost: pg.NoPeer})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer w.Close()
		gs = append(gs, w)
	}

	ctx := context.Background()
	err := gs[0].AllReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Sum)).Wait(ctx)

	var se *pg.StallError
	if errors.As(err, &se) {
		fmt.Println("culprits:", se.Culprits(), "timeout:", errors.Is(err, pg.ErrTimeout))
		msg, _, _ := strings.Cut(err.Error(), " (cause:")
		fmt.Println(msg)
	}
	// Output:
	// culprits: [1] timeout: true
	// pg: rank 1 is behind (it has issued no collective; it never entered #1) while rank 0 waited in allreduce #1; check rank 1: is its process alive, stopped, or stuck outside collectives?
}
