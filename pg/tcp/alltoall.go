package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// Tags of the all-to-all's frames: each pair of ranks exchanges a
// length frame, then the chunk's data frames.
const (
	tagA2ALen  uint32 = 0
	tagA2AData uint32 = 1 // + chunk number
)

// allToAll is the pairwise exchange (gloo's alltoallv): in round i this
// rank sends its chunk for rank me+i and takes the one from rank me-i,
// for i in [1, n). Every destination is posted first, so that data goes
// straight into out; every send is queued before the first wait, and the
// per-link writers overlap them. Each pair first exchanges the chunk's
// length, which the receiver checks against its own split before waiting
// for data: ranks whose splits disagree fail with pg.ErrMismatch naming
// the peer, and a frame never lands outside its chunk (a data frame of
// the wrong size is refused by the reader). When every rank shares this
// host, shmAllToAll moves the data instead.
func (g *Group) allToAll(r *run, out, in pg.Tensor, outS, inS []int) error {
	n, me := g.size, g.rank
	if n > 1 && n <= shm.MaxPieces && g.shm != nil && g.shm.Full() {
		return g.shm.AllToAll(r, out, in, outS, inS)
	}
	es := in.Dtype.Size()
	outOff, inOff := offsets(outS), offsets(inS)
	chunkOf := func(t pg.Tensor, off []int, j int) []byte { return t.Data[off[j]*es : off[j+1]*es] }
	copy(chunkOf(out, outOff, me), chunkOf(in, inOff, me))
	if n == 1 {
		return nil
	}
	ce := max(1, g.opts.ChunkBytes)
	frames := func(b []byte) int { return (len(b) + ce - 1) / ce }
	piece := func(b []byte, c int) []byte { return b[c*ce : min((c+1)*ce, len(b))] }

	for i := 1; i < n; i++ {
		j := mod(me-i, n)
		dst := chunkOf(out, outOff, j)
		for c := range frames(dst) {
			if err := r.post(g.links[j], tagA2AData+uint32(c), piece(dst, c)); err != nil {
				return err
			}
		}
	}
	lens := make([]byte, 8*n)
	for i := 1; i < n; i++ {
		j := mod(me+i, n)
		src := chunkOf(in, inOff, j)
		ln := binary.LittleEndian.AppendUint64(lens[8*j:8*j], uint64(len(src)))
		if err := r.send(g.links[j], tagA2ALen, ln); err != nil {
			return err
		}
		for c := range frames(src) {
			if err := r.send(g.links[j], tagA2AData+uint32(c), piece(src, c)); err != nil {
				return err
			}
		}
	}
	for i := 1; i < n; i++ {
		j := mod(me-i, n)
		b, err := r.recv(g.links[j], tagA2ALen, 8)
		if err != nil {
			return err
		}
		got := binary.LittleEndian.Uint64(b)
		r.release(b)
		if want := uint64(len(chunkOf(out, outOff, j))); got != want {
			return r.errf(j, pg.ErrMismatch, fmt.Errorf(
				"%w: rank %d sends %d bytes (%d %v elements) to this rank, but this rank's output split for it is %d elements: "+
					"output split i on rank j must equal input split j on rank i",
				pg.ErrInvalidArgument, j, got, got/uint64(es), out.Dtype, outS[j]))
		}
	}
	for i := 1; i < n; i++ {
		j := mod(me-i, n)
		for c := range frames(chunkOf(out, outOff, j)) {
			if err := r.waitPosted(g.links[j], tagA2AData+uint32(c)); err != nil {
				return err
			}
		}
	}
	return r.flush()
}

// offsets returns the prefix sums of splits: chunk j is [off[j], off[j+1]).
func offsets(splits []int) []int {
	off := make([]int, len(splits)+1)
	for i, s := range splits {
		off[i+1] = off[i] + s
	}
	return off
}
