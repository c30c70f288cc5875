//go:build linux

package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// shmMoveCase is a Gather, Scatter or AllToAll for TestShmGatherScatterAllToAll.
type shmMoveCase struct {
	name          string
	chunks        int             // through shared memory
	inLen, outLen func(r int) int // in float32
	call          func(ctx context.Context, r int, g *Group, out, in pg.Tensor) pg.Work
	want          func(r int, ins, outs []pg.Tensor) []byte // rank r's out, from every rank's in and out before the call
}

// TestShmGatherScatterAllToAll runs Gather, Scatter and AllToAll (even,
// and uneven with empty chunks) on 2 and 3 ranks, on tensors of one to
// three chunks and empty ones, in a world with shared memory and in one
// without. Through shared memory each must run the expected number of
// chunks (so it did not take TCP); both worlds' outputs must be bit for
// bit the same, and what the collective means (every byte from the rank
// and place it should come from); inputs must be left as they were.
func TestShmGatherScatterAllToAll(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			shm := newGroups(t, n, time.Minute, nil)
			tcp := newGroups(t, n, time.Minute, func(o *Options) { o.NoSharedMemory = true })
			if shm[0].shm == nil || tcp[0].shm != nil {
				t.Fatalf("shared memory in use: %v and %v, want true and false", shm[0].shm != nil, tcp[0].shm != nil)
			}
			for _, c := range shmMoveCases(n) {
				got := runMove(t, shm, c)
				ref := runMove(t, tcp, c)
				for r := range n {
					if !bytes.Equal(got[r].Data, ref[r].Data) {
						t.Errorf("%s: rank %d's output through shared memory is not TCP's", c.name, r)
					}
				}
			}
		})
	}
}

func shmMoveCases(n int) []shmMoveCase {
	fl := func(ts []pg.Tensor, r int) []byte { return ts[r].Data }
	gather := func(root, per int) shmMoveCase {
		return shmMoveCase{
			name:   fmt.Sprintf("gather of %d float32 to %d", per, root),
			chunks: max(1, ceilDiv(4*per, shm.SlotBytes)),
			inLen:  func(int) int { return per },
			outLen: func(r int) int { return rootOnly(r, root, n*per) },
			call: func(ctx context.Context, r int, g *Group, out, in pg.Tensor) pg.Work {
				return g.Gather(ctx, out, in, root)
			},
			want: func(r int, ins, outs []pg.Tensor) []byte {
				if r != root {
					return fl(outs, r)
				}
				var b []byte
				for j := range n {
					b = append(b, ins[j].Data...)
				}
				return b
			},
		}
	}
	scatter := func(root, seg int) shmMoveCase {
		return shmMoveCase{
			name:   fmt.Sprintf("scatter of %d float32 from %d", seg, root),
			chunks: max(1, ceilDiv(4*seg, shm.Piece(n, 0))),
			inLen:  func(r int) int { return rootOnly(r, root, n*seg) },
			outLen: func(int) int { return seg },
			call: func(ctx context.Context, r int, g *Group, out, in pg.Tensor) pg.Work {
				return g.Scatter(ctx, out, in, root)
			},
			want: func(r int, ins, outs []pg.Tensor) []byte { return ins[root].Slice(r*seg, (r+1)*seg).Data },
		}
	}
	// alltoall: split[i][j] float32 go from rank i to rank j.
	alltoall := func(name string, split [][]int, even bool) shmMoveCase {
		inS := func(r int) []int { return split[r] }
		outS := func(r int) []int {
			s := make([]int, n)
			for j := range n {
				s[j] = split[j][r]
			}
			return s
		}
		largest := 0
		for i := range n {
			for j := range n {
				if i != j {
					largest = max(largest, 4*split[i][j])
				}
			}
		}
		return shmMoveCase{
			name:   "alltoall " + name,
			chunks: max(1, ceilDiv(largest, shm.Piece(n, 8*(n+1)))),
			inLen:  func(r int) int { return sum(inS(r)) },
			outLen: func(r int) int { return sum(outS(r)) },
			call: func(ctx context.Context, r int, g *Group, out, in pg.Tensor) pg.Work {
				if even {
					return g.AllToAll(ctx, out, in, nil, nil)
				}
				return g.AllToAll(ctx, out, in, outS(r), inS(r))
			},
			want: func(r int, ins, outs []pg.Tensor) []byte {
				var b []byte
				for j := range n {
					off := sum(split[j][:r])
					b = append(b, ins[j].Slice(off, off+split[j][r]).Data...)
				}
				return b
			},
		}
	}
	square := func(f func(i, j int) int) [][]int {
		s := make([][]int, n)
		for i := range s {
			s[i] = make([]int, n)
			for j := range s[i] {
				s[i][j] = f(i, j)
			}
		}
		return s
	}
	big := shm.Piece(n, 8*(n+1))/4 + 5 // two chunks
	return []shmMoveCase{
		gather(n-1, shm.SlotBytes/4+3),
		gather(0, 0),
		gather(1, 1001),
		scatter(0, 2*shm.Piece(n, 0)/4+1),
		scatter(n-1, 0),
		scatter(1, 999),
		alltoall("even", square(func(i, j int) int { return 1000 }), true),
		alltoall("uneven", square(func(i, j int) int {
			switch {
			case i == 0 && j == n-1:
				return big // rank n-1 receives this alone
			case i == 1 && j != 1:
				return 0 // rank 1 sends nothing
			}
			return (i + 2*j + 1) % 3 * 333 // some empty
		}), false),
		alltoall("empty", square(func(i, j int) int { return 0 }), false),
		alltoall("three chunks", square(func(i, j int) int { return 2*big + i + j }), false),
	}
}

// rootOnly is v on root, 0 elsewhere.
func rootOnly(r, root, v int) int {
	if r != root {
		return 0
	}
	return v
}

// runMove runs c on gs, from inputs and outputs that depend on c and the
// rank alone, checks its chunks and result, and returns the outputs.
func runMove(t *testing.T, gs []*Group, c shmMoveCase) []pg.Tensor {
	t.Helper()
	n := len(gs)
	ins, outs := make([]pg.Tensor, n), make([]pg.Tensor, n)
	for r := range n {
		ins[r] = randomFloats(c.inLen(r), uint64(100+r))
		outs[r] = randomFloats(c.outLen(r), uint64(200+r))
	}
	keptIns, keptOuts := clones(ins), clones(outs)
	before := make([]uint32, n)
	for r, g := range gs {
		if g.shm != nil {
			before[r] = g.shm.Chunk()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, err := range each(gs, func(r int, g *Group) error { return c.call(ctx, r, g, outs[r], ins[r]).Wait(ctx) }) {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", c.name, r, err)
		}
	}
	for r, g := range gs {
		if g.shm != nil {
			if got := int(g.shm.Chunk() - before[r]); got != c.chunks {
				t.Errorf("%s: rank %d ran %d chunks through shared memory, want %d", c.name, r, got, c.chunks)
			}
		}
		if want := c.want(r, keptIns, keptOuts); !bytes.Equal(outs[r].Data, want) {
			t.Errorf("%s: rank %d's output is wrong", c.name, r)
		}
		if !bytes.Equal(ins[r].Data, keptIns[r].Data) {
			t.Errorf("%s: rank %d's input changed", c.name, r)
		}
	}
	return outs
}

// TestShmGarbageAllToAllSplits: a peer whose segment carries a valid
// alltoall call, with its counters ahead, but garbage where the splits
// go, makes AllToAll fail with pg.ErrMismatch naming it, whether the
// split it sends this rank is wrong, or right with an absurd largest
// chunk, or right with a large one (which runs into chunks whose calls
// the peer never wrote); nothing reads out of range.
func TestShmGarbageAllToAllSplits(t *testing.T) {
	for _, c := range []struct {
		name    string
		sent    uint64 // what rank 1 claims to send rank 0
		largest uint64
	}{
		{"wrong split", 24, 16},
		{"absurd largest", 16, 1 << 62},
		{"large largest", 16, 1 << 40},
		{"random", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroups(t, 2, 5*time.Second, nil)
			if gs[0].shm == nil {
				t.Fatal("shared memory not in use")
			}
			s := gs[0].shm
			seg := s.Segment(1)
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range seg {
				seg[i] = byte(rng.Uint32())
			}
			for _, off := range []int{shm.OffArrive, shm.OffReduced, shm.OffDone} {
				binary.NativeEndian.PutUint32(seg[off:], 1<<30)
			}
			first := s.Chunk() + 1
			slot := int(first % shm.Slots)
			if c.name != "random" {
				meta := shm.Call{Op: pg.OpAllToAll, Dtype: pg.Int64}.Meta(first)
				copy(seg[shm.OffMeta+slot*shm.MetaStride:], meta[:])
				words := seg[shm.HeaderBytes+slot*shm.SlotBytes+2*shm.Piece(2, 8*3):]
				binary.LittleEndian.PutUint64(words[0:], c.sent)
				binary.LittleEndian.PutUint64(words[16:], c.largest)
			}
			ctx := context.Background()
			out := make([]int64, 4+2)
			err := gs[0].AllToAll(ctx, pg.Int64s(out[:4:4]), pg.Int64s([]int64{1, 2, 3, 4}), nil, nil).Wait(ctx)
			var ce *pg.CollectiveError
			if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || ce.Peer != 1 {
				t.Fatalf("got %v, want a mismatch naming rank 1", err)
			}
			if out[4] != 0 || out[5] != 0 {
				t.Errorf("written past the output: %v", out)
			}
		})
	}
}
