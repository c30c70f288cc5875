package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Note [Point-to-point matching]
//
// Send and Recv are not collectives: they do not take a slot or a
// collective sequence number and do not go through the worker. Each call
// posts an entry to the world's mailbox at once, under world.mu, in the
// queue of its (source, destination, tag); a Send meets the oldest
// unmatched Recv of its queue and the other way round, so messages with
// one tag between one pair of ranks arrive in the order they were sent.
// Once matched, both entries are out of the mailbox and the receiver's
// goroutine copies straight from the sender's tensor, then finishes both
// Works. An entry still unmatched when its timer (the group timeout)
// fires or its ctx ends withdraws with pg.ErrTimeout; one whose peer
// leaves the world fails with pg.ErrRemote naming it. Each call has one
// goroutine that waits for one of those; Close waits for them.

// p2pKey is one FIFO queue of the mailbox.
type p2pKey struct{ src, dst, tag int }

// p2pQueue holds a queue's unmatched entries: sends or recvs, never both.
type p2pQueue struct{ sends, recvs []*p2pEntry }

type mailbox map[p2pKey]*p2pQueue

// p2pEntry is one Send or Recv. Its fields after settled are written
// under world.mu before settled is closed.
type p2pEntry struct {
	g       *Group
	op      opKind // opSend or opRecv
	key     p2pKey
	t       pg.Tensor
	seq     uint64
	fut     *pg.Future
	issued  time.Time
	started time.Time
	settled chan struct{} // closed when matched (peer != nil) or failed
	peer    *p2pEntry
	err     error
}

func (e *p2pEntry) peerRank() int {
	if e.op == opSend {
		return e.key.dst
	}
	return e.key.src
}

// Send sends t to rank dst, where the Recv from this rank with the same
// tag receives it. It finishes once the receiver has copied t.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	if err := backend.CheckPeer(opSend.String(), t, dst, tag, g.rank, g.Size()); err != nil {
		return g.invalid(opSend, err)
	}
	return g.post(ctx, opSend, t, p2pKey{src: g.rank, dst: dst, tag: tag})
}

// Recv receives into t what rank src sends with tag. t must hold exactly
// the bytes sent.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if err := backend.CheckPeer(opRecv.String(), t, src, tag, g.rank, g.Size()); err != nil {
		return g.invalid(opRecv, err)
	}
	return g.post(ctx, opRecv, t, p2pKey{src: src, dst: g.rank, tag: tag})
}

// post numbers the call, enters it in the mailbox and starts its waiter.
func (g *Group) post(ctx context.Context, op opKind, t pg.Tensor, key p2pKey) pg.Work {
	if err := backend.CheckContext(ctx); err != nil {
		return g.invalid(op, err)
	}
	e := &p2pEntry{g: g, op: op, key: key, t: t, issued: time.Now(), settled: make(chan struct{})}
	g.mu.Lock()
	if g.stopKind != nil {
		g.mu.Unlock()
		return pg.Completed(g.stopped(op))
	}
	if op == opSend {
		g.sendSeq[key.dst]++
		e.seq = g.sendSeq[key.dst]
	} else {
		g.recvSeq[key.src]++
		e.seq = g.recvSeq[key.src]
	}
	e.fut = pg.NewSeqFuture(e.seq)
	// Posting under g.mu orders this rank's calls in the mailbox as they
	// were numbered, and keeps halt from closing the group in between.
	g.w.post(e)
	g.p2p.Add(1)
	g.mu.Unlock()
	go g.await(ctx, e)
	return e.fut
}

// post enters e in its queue, matching it with the oldest entry of the
// other side if there is one.
func (w *world) post(e *p2pEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range []int{e.key.src, e.key.dst} {
		if w.gone[r] != "" {
			e.fail(e.collErr(pg.ErrRemote, r, errors.New(w.gone[r])))
			return
		}
	}
	q := w.mail[e.key]
	if q == nil {
		q = &p2pQueue{}
		w.mail[e.key] = q
	}
	mine, theirs := &q.sends, &q.recvs
	if e.op == opRecv {
		mine, theirs = theirs, mine
	}
	if len(*theirs) == 0 {
		*mine = append(*mine, e)
		return
	}
	p := (*theirs)[0]
	(*theirs)[0] = nil
	*theirs = (*theirs)[1:]
	if len(q.sends) == 0 && len(q.recvs) == 0 {
		delete(w.mail, e.key)
	}
	now := time.Now()
	e.peer, p.peer = p, e
	e.started, p.started = now, now
	close(e.settled)
	close(p.settled)
}

// withdraw takes e out of the mailbox with err unless it has settled.
func (w *world) withdraw(e *p2pEntry, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-e.settled:
		return
	default:
	}
	w.mail.remove(e)
	e.fail(err)
}

// remove deletes e from its queue. Callers hold world.mu.
func (m mailbox) remove(e *p2pEntry) {
	q := m[e.key]
	if q == nil {
		return
	}
	for _, l := range []*[]*p2pEntry{&q.sends, &q.recvs} {
		for i, x := range *l {
			if x == e {
				*l = append((*l)[:i], (*l)[i+1:]...)
				break
			}
		}
	}
	if len(q.sends) == 0 && len(q.recvs) == 0 {
		delete(m, e.key)
	}
}

// leave fails every unmatched entry to or from rank r. Callers hold
// world.mu.
func (m mailbox) leave(r int, why string) {
	for k, q := range m {
		if k.src != r && k.dst != r {
			continue
		}
		for _, e := range append(q.sends, q.recvs...) {
			e.fail(e.collErr(pg.ErrRemote, r, errors.New(why)))
		}
		delete(m, k)
	}
}

// fail settles e with err. Callers hold world.mu.
func (e *p2pEntry) fail(err error) {
	e.err = err
	close(e.settled)
}

func (e *p2pEntry) collErr(kind error, peer int, err error) error {
	return &pg.CollectiveError{Op: e.op.String(), Rank: e.g.rank, Peer: peer, Kind: kind, Err: err}
}

// await waits until e settles, the group timeout passes or ctx ends. A
// matched Recv then copies the message and finishes both sides.
func (g *Group) await(ctx context.Context, e *p2pEntry) {
	defer g.p2p.Done()
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case <-e.settled:
	case <-timer.C:
		g.w.withdraw(e,
			e.collErr(pg.ErrTimeout, e.peerRank(),
				fmt.Errorf("no matching %v from %s with tag %d within %v", other(e.op), g.w.name(e.peerRank()), e.key.tag,
					g.timeout)))
	case <-ctx.Done():
		g.w.withdraw(e,
			e.collErr(pg.ErrTimeout, e.peerRank(),
				fmt.Errorf("%w (no matching %v from %s with tag %d yet)", context.Cause(ctx), other(e.op), g.w.name(e.peerRank()),
					e.key.tag)))
	}
	<-e.settled // settled by now, by withdraw if by nobody else
	if e.err != nil {
		err := e.err
		if own := g.stopped(e.op); own != nil {
			err = own
		}
		e.finish(err)
		return
	}
	if e.op == opSend {
		return // the receiver finishes the send
	}
	s := e.peer
	var err error
	if len(s.t.Data) != len(e.t.Data) {
		msg := fmt.Errorf(
			"%w: %s sent %d bytes (%v x %d) with tag %d but %s posted a recv of %d bytes (%v x %d); the sizes must match",
			pg.ErrInvalidArgument,
			g.w.name(s.g.rank), len(s.t.Data), s.t.Dtype, s.t.Len(), e.key.tag, g.w.name(g.rank), len(e.t.Data), e.t.Dtype,
			e.t.Len())
		s.finish(s.collErr(pg.ErrInvalidArgument, g.rank, msg))
		e.finish(e.collErr(pg.ErrInvalidArgument, s.g.rank, msg))
		return
	}
	copy(e.t.Data, s.t.Data)
	s.finish(err)
	e.finish(err)
}

// finish completes e's Work and tells its group's completion hooks.
func (e *p2pEntry) finish(err error) {
	e.fut.Complete(err)
	g := e.g
	if !g.hooks.Active() {
		return
	}
	started := e.started
	if started.IsZero() {
		started = time.Now()
	}
	info := pg.WorkInfo{
		Op: e.op.opType(), Seq: e.seq, Rank: g.rank, Dtype: e.t.Dtype,
		Issued: e.issued, Started: started, Finished: time.Now(), Err: err,
	}
	if e.op == opSend {
		info.InBytes = int64(len(e.t.Data))
	} else {
		info.OutBytes = int64(len(e.t.Data))
	}
	g.hooks.Deliver(info)
}

func other(op opKind) opKind {
	if op == opSend {
		return opRecv
	}
	return opSend
}
