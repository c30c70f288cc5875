package tcp

import (
	"math/bits"
	"slices"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// doublingAllReduce is the latency-optimal allreduce for small buffers:
// recursive doubling, lg p rounds of a whole-buffer exchange (Thakur,
// Rabenseifner & Gropp 2005).
//
// With p the largest power of two not above n, the n-p extra ranks first
// fold in: rank p+i sends its buffer to rank i, which adds it to its own.
// Then in round k each of the first p ranks swaps buffers with rank
// me XOR 2^k and adds what it got. The combine is commutative bit for bit,
// so both partners hold the same bits after every round. Finally rank i
// sends the result to rank p+i.
func (g *Group) doublingAllReduce(r *run, t pg.Tensor, op pg.ReduceOp) error {
	kernel.Prepare(t, op, g.size)
	if err := g.doublingReduce(r, t, kernel.BaseKind(op), nil); err != nil {
		return err
	}
	kernel.Finish(t, op, g.size)
	return nil
}

// doublingReduce is recursive doubling between ranks (every rank of the
// group when nil; the hosts' leaders in hierAllReduce), combining with
// kind, without AllReduce's Prepare and Finish. It returns once this
// rank's frames are written.
func (g *Group) doublingReduce(r *run, t pg.Tensor, kind pg.ReduceKind, ranks []int) error {
	n, me := g.size, g.rank
	peer := func(i int) *link { return g.links[i] }
	if ranks != nil {
		n, me = len(ranks), slices.Index(ranks, g.rank)
		peer = func(i int) *link { return g.links[ranks[i]] }
	}
	pow := 1 << (bits.Len(uint(n)) - 1)
	rounds := bits.Len(uint(pow)) - 1
	result := rounds + 1 // the step that returns the result to the extra ranks
	p := newPlan(t, 1, g.opts.ChunkBytes, 1, rounds+2)

	if me >= pow { // an extra rank: fold in, then wait for the result
		partner := peer(me - pow)
		for c := range p.chunks {
			ch := p.chunk(0, c).Data
			if err := r.sendThenPost(partner, p.tag(0, c), ch, partner, p.tag(result, c), ch); err != nil {
				return err
			}
		}
		for c := range p.chunks {
			if err := r.waitPosted(partner, p.tag(result, c)); err != nil {
				return err
			}
		}
		return r.flush()
	}
	if me+pow < n {
		if err := combine(r, peer(me+pow), p, 0, kind); err != nil {
			return err
		}
	}
	for k := range rounds {
		partner := peer(me ^ (1 << k))
		if err := sendAll(r, partner, p, k+1); err != nil {
			return err
		}
		if err := combine(r, partner, p, k+1, kind); err != nil {
			return err
		}
	}
	if me+pow < n {
		if err := sendAll(r, peer(me+pow), p, result); err != nil {
			return err
		}
	}
	return r.flush()
}

// sendAll sends every chunk of the (single-segment) plan at step.
func sendAll(r *run, l *link, p plan, step int) error {
	for c := range p.chunks {
		if err := r.send(l, p.tag(step, c), p.chunk(0, c).Data); err != nil {
			return err
		}
	}
	return nil
}

// combine receives every chunk l sends at step and adds it into the
// buffer. It waits for this rank's own sends first: they read the buffer
// that is about to change.
func combine(r *run, l *link, p plan, step int, kind pg.ReduceKind) error {
	var small [4][]byte
	bufs := small[:0]
	if p.chunks > len(small) {
		bufs = make([][]byte, 0, p.chunks)
	}
	defer func() {
		for _, b := range bufs {
			r.release(b)
		}
	}()
	for c := range p.chunks {
		b, err := r.recv(l, p.tag(step, c), len(p.chunk(0, c).Data))
		if err != nil {
			return err
		}
		bufs = append(bufs, b)
	}
	if err := r.flush(); err != nil {
		return err
	}
	for c, b := range bufs {
		kernel.Accumulate(p.chunk(0, c), pg.Tensor{Dtype: p.t.Dtype, Data: b}, kind)
	}
	return nil
}
