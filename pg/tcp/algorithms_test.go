package tcp

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// TestAllReduceAlgorithms runs both allreduce algorithms, forced, over
// world sizes and lengths that exercise the plan's edge cases (empty
// chunks, non-power-of-two worlds, more chunks than steps), with a tiny
// chunk so the pipeline has many stages. Inputs are small integers in
// float32, so every order of summation gives the exact result.
func TestAllReduceAlgorithms(t *testing.T) {
	for _, algo := range []struct {
		name      string
		threshold int
	}{{"ring", 1}, {"doubling", math.MaxInt}, {"shm", 1}} {
		for n := 1; n <= 5; n++ {
			t.Run(fmt.Sprintf("%s/world=%d", algo.name, n), func(t *testing.T) {
				gs := newGroups(t, n, time.Minute, func(o *Options) {
					o.RingThreshold = algo.threshold
					o.ChunkBytes = 64
					o.NoSharedMemory = algo.name != "shm"
				})
				if want := algo.name == "shm" && n > 1 && shm.Supported; (gs[0].shm != nil) != want {
					t.Fatalf("shared memory in use = %v, want %v", gs[0].shm != nil, want)
				}
				lengths := []int{0, 1, 2, n - 1, n + 1, 16*n + 3, 1000}
				if algo.name == "shm" {
					// Past a slot: several chunks, both slots, a short last one.
					lengths = append(lengths, 2*shm.SlotBytes/4+n+1)
				}
				for _, length := range lengths {
					checkAllReduce(t, gs, length)
				}
			})
		}
	}
}

func checkAllReduce(t *testing.T, gs []*Group, length int) {
	t.Helper()
	n := len(gs)
	ins := make([][]float32, n)
	errs := each(gs, func(r int, g *Group) error {
		ins[r] = make([]float32, length)
		for i := range ins[r] {
			ins[r][i] = float32((r+1)*1000 + i)
		}
		return g.AllReduce(context.Background(), pg.Float32s(ins[r]), pg.Op(pg.Sum)).Wait(context.Background())
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("length %d: rank %d: %v", length, r, err)
		}
	}
	for i := range length {
		want := float32(0)
		for r := range n {
			want += float32((r+1)*1000 + i)
		}
		for r := range n {
			if ins[r][i] != want {
				t.Fatalf("length %d: rank %d: element %d is %v, want %v", length, r, i, ins[r][i], want)
			}
		}
	}
}

// TestCollectivesSmallChunks checks broadcast, allgather and
// reduce-scatter over TCP with a chunk so small that every path
// pipelines, and the same through shared memory.
func TestCollectivesSmallChunks(t *testing.T) {
	for _, mode := range []string{"tcp", "shm"} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/world=%d", mode, n), func(t *testing.T) { collectivesSmallChunks(t, n, mode == "tcp") })
		}
	}
}

func collectivesSmallChunks(t *testing.T, n int, noShm bool) {
	gs := newGroups(t, n, time.Minute, func(o *Options) { o.ChunkBytes = 16; o.NoSharedMemory = noShm })
	ctx := context.Background()
	for root := range n {
		bufs := make([][]byte, n)
		errs := each(gs, func(r int, g *Group) error {
			bufs[r] = make([]byte, 100)
			if r == root {
				for i := range bufs[r] {
					bufs[r][i] = byte(i + root)
				}
			}
			return g.Broadcast(ctx, pg.Uint8s(bufs[r]), root).Wait(ctx)
		})
		for r := range n {
			if errs[r] != nil || !bytes.Equal(bufs[r], bufs[root]) {
				t.Fatalf("broadcast from %d: rank %d: err %v, got %v", root, r, errs[r], bufs[r][:8])
			}
		}
	}
	outs := make([][]int32, n)
	errs := each(gs, func(r int, g *Group) error {
		in := []int32{int32(r), int32(10 * r), int32(100 * r)}
		outs[r] = make([]int32, 3*n)
		return g.AllGather(ctx, pg.Int32s(outs[r]), pg.Int32s(in)).Wait(ctx)
	})
	for r := range n {
		for j := range n {
			if errs[r] != nil || outs[r][3*j] != int32(j) || outs[r][3*j+2] != int32(100*j) {
				t.Fatalf("allgather: rank %d: err %v, got %v", r, errs[r], outs[r])
			}
		}
	}
	rs := make([][]int64, n)
	errs = each(gs, func(r int, g *Group) error {
		in := make([]int64, 7*n)
		for i := range in {
			in[i] = int64(i*(r+1)) + 5
		}
		rs[r] = make([]int64, 7)
		return g.ReduceScatter(ctx, pg.Int64s(rs[r]), pg.Int64s(in), pg.Op(pg.Avg)).Wait(ctx)
	})
	for r := range n {
		for i := range 7 {
			sum := int64(0)
			for q := range n {
				sum += int64((7*r+i)*(q+1)) + 5
			}
			if errs[r] != nil || rs[r][i] != sum/int64(n) {
				t.Fatalf("reducescatter: rank %d: err %v, element %d is %d, want %d", r, errs[r], i, rs[r][i], sum/int64(n))
			}
		}
	}
}
