package local

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Each collective runs in three steps on every rank: prepare (alone, on
// its own buffers, before arriving), compute (once every rank has arrived,
// straight from the peers' buffers, each rank on a disjoint part of the
// output) and finish (alone again, after every rank has departed).

// prepare scales rank r's own contribution for AVG and PREMUL_SUM. A rank
// scales only its own buffer: its peers may not have arrived yet.
// ReduceScatter scales a copy, so the caller's input is left as it was.
func prepare(d desc, a args, n, r int) args {
	switch d.kind {
	case opAllReduce:
		kernel.Prepare(a.in, a.op, n)
	case opReduceScatter:
		a.in = scaledCopy(a.in, a.op, n)
	case opReduce:
		if r == d.root {
			kernel.Prepare(a.in, a.op, n)
		} else {
			a.in = scaledCopy(a.in, a.op, n)
		}
	case opAllToAll:
		a.in = unaliased(a.in, a.out)
	case opAllReduceCoalesced:
		for _, t := range a.ins {
			kernel.Prepare(t, a.op, n)
		}
	case opReduceScatterCoalesced:
		ins := make([]pg.Tensor, len(a.ins))
		for i, t := range a.ins {
			ins[i] = scaledCopy(t, a.op, n)
		}
		a.ins = ins
	}
	return a
}

// scaledCopy returns t, or a scaled copy of it if op scales its inputs,
// so that the caller's t is left as it was.
func scaledCopy(t pg.Tensor, op pg.ReduceOp, n int) pg.Tensor {
	if !kernel.Scales(op, t.Dtype) {
		return t
	}
	c := pg.NewTensor(t.Dtype, t.Len())
	copy(c.Data, t.Data)
	kernel.Prepare(c, op, n)
	return c
}

// compute does rank r's share of the ready slot s.
func compute(s *slot, r int) {
	d := s.descs[r]
	switch d.kind {
	case opAllReduce:
		allReduceShard(s, r, d)
	case opBroadcast:
		if r != d.root {
			copy(s.args[r].in.Data, s.args[d.root].in.Data)
		}
	case opAllGather:
		allGather(s, r)
	case opReduceScatter:
		reduceScatter(s, r, d)
	case opReduce:
		reduceShard(s, r, d)
	case opGather:
		gather(s, r, d)
	case opScatter:
		scatter(s, r, d)
	case opAllToAll:
		allToAll(s, r)
	case opAllReduceCoalesced:
		allReduceCoalesced(s, r, d)
	case opAllGatherCoalesced:
		allGatherCoalesced(s, r)
	case opReduceScatterCoalesced:
		reduceScatterCoalesced(s, r, d)
	case opNewGroup, opSplit:
		*s.args[r].sub = s.subs[r]
	}
}

// allReduceShard is the fused shard algorithm: rank r reduces elements
// [r*L/n, (r+1)*L/n) of every rank's buffer, in rank order, and writes the
// result back to every rank's buffer. Each element is read n times and
// written n times in all, which is the least any in-place allreduce can
// move, and the n ranks do it in parallel.
func allReduceShard(s *slot, r int, d desc) {
	n := len(s.args)
	lo, hi := r*d.len/n, (r+1)*d.len/n
	parts := make([]pg.Tensor, n)
	for i, a := range s.args {
		parts[i] = a.in.Slice(lo, hi)
	}
	kernel.ReduceN(parts, parts, kernel.BaseKind(pg.Op(d.op)))
}

// disagree says how ranks a and b, which issued the same desc, disagree
// on the rest of their arguments, or "" if they agree.
func disagree(k opKind, a, b int, aa, ab args) string {
	switch k {
	case opAllToAll:
		return splitsDisagree(a, b, aa, ab)
	case opAllReduceCoalesced, opAllGatherCoalesced, opReduceScatterCoalesced:
		return tensorsDisagree(k, a, b, aa.ins, ab.ins)
	case opNewGroup:
		return ranksDisagree(a, b, aa.ranks, ab.ranks)
	}
	return ""
}

// allGather copies every rank's input into rank r's output.
func allGather(s *slot, r int) {
	out := s.args[r].out.Data
	for _, a := range s.args {
		out = out[copy(out, a.in.Data):]
	}
}

// reduceScatter reduces chunk r of every rank's input into rank r's output.
func reduceScatter(s *slot, r int, d desc) {
	ins := make([]pg.Tensor, len(s.args))
	for i, a := range s.args {
		ins[i] = a.in.Slice(r*d.len, (r+1)*d.len)
	}
	kernel.ReduceN([]pg.Tensor{s.args[r].out}, ins, kernel.BaseKind(pg.Op(d.op)))
}

// finish completes rank r's result alone: integer AVG divides its sum.
func finish(d desc, a args, n, r int) {
	switch d.kind {
	case opAllReduce:
		kernel.Finish(a.in, a.op, n)
	case opReduceScatter:
		kernel.Finish(a.out, a.op, n)
	case opReduce:
		if r == d.root {
			kernel.Finish(a.in, a.op, n)
		}
	case opAllReduceCoalesced:
		for _, t := range a.ins {
			kernel.Finish(t, a.op, n)
		}
	case opReduceScatterCoalesced:
		for _, t := range a.outs {
			kernel.Finish(t, a.op, n)
		}
	}
}
