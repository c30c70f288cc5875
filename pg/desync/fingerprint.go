package desync

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
)

// fpSize is the size of an encoded fingerprint: every rank contributes
// exactly this many bytes to the check's allgather.
const fpSize = 64

// fpVersion is the first byte of an encoded fingerprint, so that a peer
// running other code shows up as a mismatch rather than as garbage.
const fpVersion = 1

// noRoot is the root of a collective that has none.
const noRoot = -1

// fingerprint is what must agree across ranks for one collective, as
// c10d's CollectiveFingerPrint: op, dtype, element counts, root, reduce
// op, and for coalesced collectives and uneven all-to-alls, hashes of the
// per-tensor lengths and split sizes. Every field is rank-invariant in a
// correct program: for Gather and Scatter only the per-rank chunk counts
// (non-root ranks may pass empty buffers), and for AllToAll nothing but
// the split hashes, whose sums over the ranks must agree.
type fingerprint struct {
	op      pg.OpType
	dtype   pg.Dtype
	reduce  pg.ReduceKind
	factor  float64
	root    int32
	tensors uint32
	n       int64  // elements (per rank for allgather/gather/scatter/reducescatter)
	shape   uint64 // hash of the per-tensor (dtype, length) of coalesced collectives
	// sent and recv are, for AllToAll, the sums of split(me, j, inSplits[j])
	// and split(i, me, outSplits[i]); summed over all ranks they are equal
	// exactly when every outSplits[i] on rank j equals inSplits[j] on
	// rank i (up to a 2^-64 collision).
	sent, recv uint64
}

func (f fingerprint) encode() []byte {
	b := make([]byte, fpSize)
	b[0] = fpVersion
	b[1] = byte(f.op)
	b[2] = byte(f.dtype)
	b[3] = byte(f.reduce)
	binary.LittleEndian.PutUint32(b[4:], uint32(f.root))
	binary.LittleEndian.PutUint32(b[8:], f.tensors)
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(f.factor))
	binary.LittleEndian.PutUint64(b[24:], uint64(f.n))
	binary.LittleEndian.PutUint64(b[32:], f.shape)
	binary.LittleEndian.PutUint64(b[40:], f.sent)
	binary.LittleEndian.PutUint64(b[48:], f.recv)
	return b
}

// decodeFingerprint reads a peer's fingerprint. It never fails: a wrong
// size or version decodes as an op no rank issues, which then mismatches.
func decodeFingerprint(b []byte) fingerprint {
	if len(b) != fpSize || b[0] != fpVersion {
		return fingerprint{root: noRoot, n: -1}
	}
	return fingerprint{
		op:      pg.OpType(b[1]),
		dtype:   pg.Dtype(b[2]),
		reduce:  pg.ReduceKind(b[3]),
		root:    int32(binary.LittleEndian.Uint32(b[4:])),
		tensors: binary.LittleEndian.Uint32(b[8:]),
		factor:  math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
		n:       int64(binary.LittleEndian.Uint64(b[24:])),
		shape:   binary.LittleEndian.Uint64(b[32:]),
		sent:    binary.LittleEndian.Uint64(b[40:]),
		recv:    binary.LittleEndian.Uint64(b[48:]),
	}
}

// same reports whether f and o describe the same collective; the
// all-to-all split sums are compared across the whole group instead.
func (f fingerprint) same(o fingerprint) bool {
	f.sent, f.recv, o.sent, o.recv = 0, 0, 0, 0
	return f == o
}

func (f fingerprint) String() string {
	if f.op == 0 {
		return "an unreadable fingerprint"
	}
	elems := fmt.Sprintf("%v x%d", f.dtype, f.n)
	switch f.op {
	case pg.OpBarrier, pg.OpMonitoredBarrier:
		return f.op.String() + "()"
	case pg.OpAllReduce:
		return fmt.Sprintf("%v(%s, %v)", f.op, elems, f.reduceOp())
	case pg.OpBroadcast:
		return fmt.Sprintf("%v(%s, root %d)", f.op, elems, f.root)
	case pg.OpAllGather:
		return fmt.Sprintf("%v(%s per rank)", f.op, elems)
	case pg.OpReduceScatter:
		return fmt.Sprintf("%v(%s per rank, %v)", f.op, elems, f.reduceOp())
	case pg.OpReduce:
		return fmt.Sprintf("%v(%s, root %d, %v)", f.op, elems, f.root, f.reduceOp())
	case pg.OpGather, pg.OpScatter:
		return fmt.Sprintf("%v(%s per rank, root %d)", f.op, elems, f.root)
	case pg.OpAllToAll:
		return fmt.Sprintf("%v(%v)", f.op, f.dtype)
	case pg.OpAllReduceCoalesced, pg.OpReduceScatterCoalesced:
		return fmt.Sprintf("%v(%d tensors, %s in all, shapes %016x, %v)", f.op, f.tensors, elems, f.shape, f.reduceOp())
	case pg.OpAllGatherCoalesced:
		return fmt.Sprintf("%v(%d tensors, %s in all, shapes %016x)", f.op, f.tensors, elems, f.shape)
	}
	return fmt.Sprintf("%v(%s)", f.op, elems)
}

func (f fingerprint) reduceOp() pg.ReduceOp { return pg.ReduceOp{Kind: f.reduce, Factor: f.factor} }

func withOp(f fingerprint, op pg.ReduceOp) fingerprint {
	f.reduce, f.factor = op.Kind, op.Factor
	return f
}

func fpOf(op pg.OpType, t pg.Tensor, root int) fingerprint {
	return fingerprint{op: op, dtype: t.Dtype, root: int32(root), tensors: 1, n: int64(t.Len())}
}

func fpAllToAll(rank int, dtype pg.Dtype, outSplits, inSplits []int) fingerprint {
	f := fingerprint{op: pg.OpAllToAll, dtype: dtype, root: noRoot, tensors: 1}
	for j, n := range inSplits {
		f.sent += splitHash(rank, j, n)
	}
	for i, n := range outSplits {
		f.recv += splitHash(i, rank, n)
	}
	return f
}

func fpCoalesced(op pg.OpType, ins []pg.Tensor, rop pg.ReduceOp) fingerprint {
	f := withOp(fingerprint{op: op, root: noRoot, tensors: uint32(len(ins))}, rop)
	h := uint64(len(ins))
	for i, t := range ins {
		if i == 0 {
			f.dtype = t.Dtype
		}
		f.n += int64(t.Len())
		h = mix(h ^ mix(uint64(t.Dtype)<<56^uint64(t.Len())))
	}
	f.shape = h
	return f
}

// splitHash is the contribution of "src sends n elements to dst".
func splitHash(src, dst, n int) uint64 {
	return mix(mix(mix(uint64(src)+1)^uint64(dst)) ^ uint64(n))
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// compare checks every rank's fingerprint (index = rank) as rank me and
// returns a *pg.MismatchError, or nil when they agree.
func compare(me int, seq uint64, fps []fingerprint) error {
	// The majority signature is the reference; ties go to the group
	// holding the lowest rank, so every rank names the same ranks.
	best, bestCount := 0, 0
	for r := range fps {
		count := 0
		for q := range fps {
			if fps[q].same(fps[r]) {
				count++
			}
		}
		if count > bestCount {
			best, bestCount = r, count
		}
	}
	var differ []int
	for r := range fps {
		if !fps[r].same(fps[best]) {
			differ = append(differ, r)
		}
	}
	reason := ""
	if len(differ) == 0 && fps[best].op == pg.OpAllToAll {
		var sent, recv uint64
		for _, f := range fps {
			sent += f.sent
			recv += f.recv
		}
		if sent != recv {
			reason = "alltoall split sizes do not pair up: outSplits[i] on rank j must equal inSplits[j] on rank i"
		}
	}
	if len(differ) == 0 && reason == "" {
		return nil
	}
	sigs := make([]string, len(fps))
	for r, f := range fps {
		sigs[r] = f.String()
	}
	return &pg.MismatchError{Rank: me, Seq: seq, Signature: sigs[me], Signatures: sigs, Differ: differ, Reason: reason}
}
