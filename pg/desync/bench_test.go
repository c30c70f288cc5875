package desync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
)

// BenchmarkAllReduce compares a bare pg/local world of 2 ranks with the
// same world wrapped (diagnosis only) and wrapped with CheckCollectives:
// b.N allreduces of 4 KiB and 1 MiB of float32, each waited for.
//
//	go test -run - -bench AllReduce ./pg/desync/
func BenchmarkAllReduce(b *testing.B) {
	const n = 2
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, mode := range []string{"bare", "wrapped", "checked"} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				inner, err := local.New(n, local.Options{Timeout: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				hs := store.NewHashStore(store.HashStoreOptions{})
				defer hs.Close()
				gs := make([]pg.ProcessGroup, n)
				for r := range gs {
					gs[r] = inner[r]
					if mode != "bare" {
						if gs[r], err = Wrap(inner[r], hs, Options{CheckCollectives: mode == "checked"}); err != nil {
							b.Fatal(err)
						}
					}
					defer gs[r].Close()
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				var wg sync.WaitGroup
				errs := make([]error, n)
				for r, g := range gs {
					wg.Go(func() {
						ctx := context.Background()
						buf := make([]float32, size/4)
						for range b.N {
							if err := g.AllReduce(ctx, pg.Float32s(buf), pg.Op(pg.Sum)).Wait(ctx); err != nil {
								errs[r] = err
								return
							}
						}
					})
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
