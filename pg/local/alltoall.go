package local

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// AllToAll is c10d's alltoall_base: rank r copies chunk r of every rank's
// input straight into its own output, chunk i from rank i. The split
// sizes of every pair of ranks are checked against each other when the
// ranks arrive, before any byte moves: a pair that does not match fails
// the collective on every rank with pg.ErrMismatch (and
// pg.ErrInvalidArgument) naming both ranks.

// AllToAll sends chunk j of in to rank j and receives chunk i of out from
// rank i. Nil splits mean equal chunks; see pg.AllToAller.
func (g *Group) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	outS, inS, err := backend.CheckAllToAll(out, in, outSplits, inSplits, g.Size())
	if err != nil {
		return g.invalid(opAllToAll, err)
	}
	d := desc{kind: opAllToAll, dtype: in.Dtype}
	a := args{in: in, out: out, inOff: offsets(inS), outOff: offsets(outS)}
	return g.submit(ctx, &task{desc: d, args: a, timeout: g.timeout})
}

// offsets returns the prefix sums of sizes, starting at 0.
func offsets(sizes []int) []int {
	off := make([]int, len(sizes)+1)
	for i, n := range sizes {
		off[i+1] = off[i] + n
	}
	return off
}

// splitsDisagree checks that ranks a and b agree on the chunks between
// them: what a sends to b is what b expects from a, and the other way.
func splitsDisagree(a, b int, aa, ab args) string {
	chunk := func(off []int, i int) int { return off[i+1] - off[i] }
	if s, e := chunk(aa.inOff, b), chunk(ab.outOff, a); s != e {
		return fmt.Sprintf("alltoall: rank %d sends %d elements to rank %d, which expects %d (input split %d of rank %d "+
			"must equal output split %d of rank %d)", a, s, b, e, b, a, a, b)
	}
	if s, e := chunk(ab.inOff, a), chunk(aa.outOff, b); s != e {
		return fmt.Sprintf("alltoall: rank %d sends %d elements to rank %d, which expects %d (input split %d of rank %d "+
			"must equal output split %d of rank %d)", b, s, a, e, a, b, b, a)
	}
	return ""
}

// allToAll fills rank r's output from every rank's chunk for r.
func allToAll(s *slot, r int) {
	me := s.args[r]
	es := me.out.Dtype.Size()
	for i, a := range s.args {
		src := a.in.Data[a.inOff[r]*es : a.inOff[r+1]*es]
		copy(me.out.Data[me.outOff[i]*es:me.outOff[i+1]*es], src)
	}
}

// unaliased returns in, or a copy of it if it shares memory with out: the
// peers read in while this rank writes out.
func unaliased(in, out pg.Tensor) pg.Tensor {
	if len(in.Data) == 0 || len(out.Data) == 0 {
		return in
	}
	i0 := uintptr(unsafe.Pointer(unsafe.SliceData(in.Data)))
	o0 := uintptr(unsafe.Pointer(unsafe.SliceData(out.Data)))
	if i0 < o0+uintptr(len(out.Data)) && o0 < i0+uintptr(len(in.Data)) {
		c := pg.NewTensor(in.Dtype, in.Len())
		copy(c.Data, in.Data)
		return c
	}
	return in
}
