package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// Point-to-point calls do not use the group's communicator. As c10d's
// ProcessGroupNCCL makes a communicator per peer pair for unbatched
// send/recv, each direction between this rank and a peer gets a lane: a
// two-rank communicator made lazily through the store (the sender
// publishes a unique id under "<StoreKey>/p2p/<src>-<dst>"), its own
// stream, and a goroutine that carries out the lane's calls in order. So
// a send never holds up the group's collectives or the other direction,
// and sends and receives need not be issued at the same point relative to
// collectives; between two ranks they still match in order, whatever the
// tag (pg.PointToPoint's documented exception).
//
// Each call first exchanges the two sides' byte counts (8 bytes each way,
// on the lane) and the host compares them: a Send and Recv of different
// sizes fail with pg.ErrInvalidArgument on both sides and leave the lane
// usable, where NCCL alone would hang or corrupt. The price is a host
// round trip per call.

// laneKey names a lane: this rank sends to peer, or receives from it.
type laneKey struct {
	send bool
	peer int
}

// lane is one direction of point-to-point traffic with one peer.
type lane struct {
	g   *Group
	key laneKey
	// Guarded by g.mu: be is nil until the communicator is made; ops are
	// the issued calls not yet finished, the first being carried out.
	be   binding.Backend
	ops  []*p2pOp
	kick chan struct{}
	done chan struct{} // closed when run returns
}

// p2pOp is one Send or Recv on a lane.
type p2pOp struct {
	w *work
	t pg.Tensor
}

// Send sends t to dst (ncclSend, 2.7, on this pair's own communicator).
// NCCL has no tags: tag is checked and recorded, not matched, as in
// ProcessGroupNCCL; the sends to a peer match its receives from this rank
// in the order issued. The receiver must post a Recv of the same size;
// otherwise both fail with pg.ErrInvalidArgument.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	if err := backend.CheckPeer("send", t, dst, tag, g.rank, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpSend, dst, err)
	}
	if _, err := g.onDevice("send", t); err != nil {
		return g.invalid(pg.OpSend, dst, err)
	}
	return g.issueP2P(ctx, laneKey{send: true, peer: dst}, t)
}

// Recv receives t from src (ncclRecv, 2.7); see Send.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if err := backend.CheckPeer("recv", t, src, tag, g.rank, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpRecv, src, err)
	}
	if _, err := g.onDevice("recv", t); err != nil {
		return g.invalid(pg.OpRecv, src, err)
	}
	return g.issueP2P(ctx, laneKey{send: false, peer: src}, t)
}

// issueP2P numbers the call and queues it on its lane. A nil ctx is
// refused before anything is numbered.
func (g *Group) issueP2P(ctx context.Context, k laneKey, t pg.Tensor) pg.Work {
	op := pg.OpRecv
	d := desc{op: op, peer: k.peer, dtype: t.Dtype, outBytes: int64(t.Bytes())}
	if k.send {
		op = pg.OpSend
		d = desc{op: op, peer: k.peer, dtype: t.Dtype, inBytes: int64(t.Bytes())}
	}
	if err := backend.CheckContext(ctx); err != nil {
		return g.invalid(op, k.peer, err)
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.failedLocked(); err != nil {
		return pg.Completed(&pg.CollectiveError{Op: op.String(), Rank: g.rank, Peer: k.peer, Kind: kindOfFailure(err),
			Err: err})
	}
	pk := p2pKey{op, k.peer}
	g.p2pSeq[pk]++
	seq := g.p2pSeq[pk]
	w := &work{fut: pg.NewSeqFuture(seq), op: op, seq: seq, peer: k.peer, dtype: t.Dtype, inBytes: d.inBytes,
		outBytes: d.outBytes, issued: now, deadline: now.Add(g.opts.Timeout), ctx: ctx}
	l := g.lanes[k]
	if l == nil {
		l = &lane{g: g, key: k, kick: make(chan struct{}, 1), done: make(chan struct{})}
		g.lanes[k] = l
		go l.run()
	}
	l.ops = append(l.ops, &p2pOp{w: w, t: t})
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return w.fut
}

// run carries out the lane's calls in order until the group fails or
// closes.
func (l *lane) run() {
	defer close(l.done)
	for {
		l.g.mu.Lock()
		var op *p2pOp
		if len(l.ops) > 0 {
			op = l.ops[0]
		}
		l.g.mu.Unlock()
		if op == nil {
			select {
			case <-l.kick:
				continue
			case <-l.g.dead:
				return
			}
		}
		l.carry(op)
	}
}

// carry carries out one call; on return op is finished (here or by
// Group.fail).
func (l *lane) carry(op *p2pOp) {
	w := op.w
	ctx, cancel := l.opContext(w)
	defer cancel()
	be, err := l.comm(ctx, w)
	if err != nil {
		l.fail(w, err)
		return
	}
	hdr, b, err := l.buffers(op)
	if err != nil {
		l.fail(w, err)
		return
	}
	// 1. The byte counts, both ways (and the payload's upload).
	theirs, err := l.exchangeSizes(ctx, be, op, hdr, b)
	if err != nil {
		l.fail(w, err)
		return
	}
	n := op.t.Bytes()
	if theirs != uint64(n) {
		l.sizeMismatch(w, uint64(n), theirs)
		return
	}
	if n == 0 {
		l.finish(w, nil)
		return
	}
	// 2. The payload.
	if err := l.payload(ctx, be, op, b); err != nil {
		l.fail(w, err)
		return
	}
	l.finish(w, nil)
}

// comm returns the lane's communicator, making it on first use.
func (l *lane) comm(ctx context.Context, w *work) (binding.Backend, error) {
	l.g.mu.Lock()
	be := l.be
	l.g.mu.Unlock()
	if be != nil {
		return be, nil
	}
	return l.connect(ctx, w)
}

// buffers takes op's staging buffers from the pool and hands them to op's
// work, which returns them: hdr holds the two byte counts, b the payload of
// a host tensor (nil for a device tensor, sent and received in place, or an
// empty one).
func (l *lane) buffers(op *p2pOp) (hdr, b *buf, err error) {
	g, w := l.g, op.w
	n, dev := op.t.Bytes(), op.t.IsDevice()
	if hdr, err = g.pool.get(16); err != nil {
		return nil, nil, err
	}
	w.bufs = append(w.bufs, hdr)
	if n > 0 && !dev {
		if b, err = g.pool.get(n); err != nil {
			return nil, nil, err
		}
		w.bufs = append(w.bufs, b)
	}
	return hdr, b, nil
}

// pairPeer is the other side's rank in the lane's two-rank communicator,
// in which the sender is rank 0.
func (l *lane) pairPeer() int {
	if l.key.send {
		return 1
	}
	return 0
}

// exchangeSizes sends this side's byte count and returns the other side's,
// uploading a host payload to send on the way.
func (l *lane) exchangeSizes(ctx context.Context, be binding.Backend, op *p2pOp, hdr, b *buf) (uint64, error) {
	n, dev := op.t.Bytes(), op.t.IsDevice()
	binary.LittleEndian.PutUint64(hdr.host[:8], uint64(n))
	err := be.H2D(hdr.dev, hdr.host[:8])
	if err == nil && l.key.send && n > 0 && !dev {
		copy(b.host[:n], op.t.Data)
		err = be.H2D(b.dev, b.host[:n])
	}
	if err == nil {
		err = be.Group(func() error {
			if err := be.Send(hdr.dev, 8, libnccl.Uint8, l.pairPeer()); err != nil {
				return err
			}
			return be.Recv(hdr.dev+8, 8, libnccl.Uint8, l.pairPeer())
		})
	}
	if err == nil {
		err = be.D2H(hdr.host[8:16], hdr.dev+8)
	}
	if err == nil {
		err = l.await(ctx, be, op.w)
	}
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(hdr.host[8:16]), nil
}

// sizeMismatch fails w, whose side counts n bytes where the other counts
// theirs, saying which rank sends how much; the lane stays usable.
func (l *lane) sizeMismatch(w *work, n, theirs uint64) {
	g := l.g
	sends, recvs := n, theirs
	sender, receiver := g.rank, l.key.peer
	if !l.key.send {
		sends, recvs, sender, receiver = theirs, n, l.key.peer, g.rank
	}
	g.pool.put(w.bufs...) // the lane's stream is idle: the buffers may be reused
	w.bufs = nil
	l.finish(w, &pg.CollectiveError{Op: w.op.String(), Rank: g.rank, Peer: l.key.peer, Kind: pg.ErrInvalidArgument,
		Err: fmt.Errorf("seq %d: rank %d sends %d bytes and rank %d receives %d: a Recv must be the size of its Send",
			w.seq, sender, sends, receiver, recvs)})
}

// payload sends or receives op's bytes, a device tensor in place and a
// host one through b, and waits for the lane's stream.
func (l *lane) payload(ctx context.Context, be binding.Backend, op *p2pOp, b *buf) error {
	n, dev := op.t.Bytes(), op.t.IsDevice()
	var err error
	switch {
	case dev && l.key.send:
		err = be.Send(dptr(op.t, 0), n, libnccl.Uint8, l.pairPeer())
	case dev:
		err = be.Recv(dptr(op.t, 0), n, libnccl.Uint8, l.pairPeer())
	case l.key.send:
		err = be.Send(b.dev, n, libnccl.Uint8, l.pairPeer())
	default:
		err = be.Recv(b.dev, n, libnccl.Uint8, l.pairPeer())
		if err == nil {
			err = be.D2H(b.host[:n], b.dev)
			op.w.copies = append(op.w.copies, copyBack{dst: op.t.Data, src: b.host[:n]})
		}
	}
	if err == nil {
		err = l.await(ctx, be, op.w)
	}
	return err
}

// opContext ends at w's deadline, when w's ctx ends, or when the group
// fails.
func (l *lane) opContext(w *work) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(context.Background(), w.deadline)
	stop1 := context.AfterFunc(w.ctx, cancel)
	go func() {
		select {
		case <-l.g.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stop1(); cancel() }
}

// connect makes the lane's two-rank communicator: the sender publishes a
// unique id, the receiver waits for it or for the sender's departure.
func (l *lane) connect(ctx context.Context, w *work) (binding.Backend, error) {
	g := l.g
	if g.st == nil {
		return nil, &pg.CollectiveError{Op: w.op.String(), Rank: g.rank, Peer: l.key.peer, Kind: pg.ErrInvalidArgument,
			Err: errors.New("this group has no store to make a point-to-point communicator with")}
	}
	src, dst, rank := g.rank, l.key.peer, 0
	if !l.key.send {
		src, dst, rank = l.key.peer, g.rank, 1
	}
	key := fmt.Sprintf("%s/p2p/%d-%d", g.storeKey, src, dst)
	var id libnccl.UniqueID
	if l.key.send {
		var err error
		if id, err = g.be.UniqueID(); err != nil {
			return nil, err
		}
		if err := g.st.Set(ctx, key, id[:]); err != nil {
			return nil, fmt.Errorf("publishing the unique id of the point-to-point communicator to rank %d: %w", dst, err)
		}
	} else {
		b, err := g.getUnlessGone(ctx, key, src)
		if err != nil {
			return nil, err
		}
		if len(b) != len(id) {
			return nil, fmt.Errorf("store key %q holds %d bytes, want an NCCL unique id of %d", key, len(b), len(id))
		}
		copy(id[:], b)
	}
	be, err := g.be.Pair(ctx, id, rank)
	if err != nil {
		return nil, fmt.Errorf("making the point-to-point communicator with rank %d: %w", l.key.peer, err)
	}
	g.mu.Lock()
	if g.failure != nil {
		g.mu.Unlock()
		_ = be.Abort()
		_ = be.Close(context.Background())
		return nil, g.failure
	}
	l.be = be
	g.mu.Unlock()
	return be, nil
}

// goneKey is where rank publishes that its group failed or closed.
func goneKey(storeKey string, rank int) string { return fmt.Sprintf("%s/p2p/gone/%d", storeKey, rank) }

// getUnlessGone waits for key, or fails when peer publishes its departure.
func (g *Group) getUnlessGone(ctx context.Context, key string, peer int) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		b    []byte
		err  error
		gone bool
	}
	ch := make(chan res, 2)
	go func() { b, err := g.st.Get(ctx, key); ch <- res{b: b, err: err} }()
	go func() { b, err := g.st.Get(ctx, goneKey(g.storeKey, peer)); ch <- res{b: b, err: err, gone: true} }()
	for range 2 {
		r := <-ch
		switch {
		case r.err == nil && !r.gone:
			return r.b, nil
		case r.err == nil:
			return nil, &pg.CollectiveError{Op: "recv", Rank: g.rank, Peer: peer, Kind: pg.ErrRemote,
				Err: fmt.Errorf("rank %d left the group (%s) before sending", peer, r.b)}
		case ctx.Err() != nil:
			return nil, fmt.Errorf("waiting for rank %d's point-to-point communicator: %w", peer, context.Cause(ctx))
		}
	}
	return nil, fmt.Errorf("waiting for rank %d's point-to-point communicator: the store failed", peer)
}

// await records an event on be's stream and waits for it, polling be for
// asynchronous errors; it fails when ctx ends.
func (l *lane) await(ctx context.Context, be binding.Backend, w *work) error {
	ev, err := be.Record()
	if err != nil {
		return err
	}
	defer ev.Destroy()
	opts := l.g.opts
	tick := time.NewTicker(opts.PollInterval)
	defer tick.Stop()
	lastAsync := time.Now()
	for {
		err := ev.Query()
		if !errors.Is(err, libnccl.ErrNotReady) {
			return err
		}
		if time.Since(lastAsync) >= opts.AsyncErrorInterval {
			lastAsync = time.Now()
			if r, err := be.AsyncError(); err != nil || (r != libnccl.Success && r != libnccl.InProgress) {
				if err == nil {
					err = fmt.Errorf("ncclCommGetAsyncError: %w", r)
					if d := be.LastError(); d != "" {
						err = fmt.Errorf("ncclCommGetAsyncError: %w: %s", r, d)
					}
				}
				return err
			}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// fail fails the group for w's sake (a lane's failure leaves its stream
// and communicator in an unknown state), naming w's peer.
func (l *lane) fail(w *work, err error) {
	g := l.g
	var ce *pg.CollectiveError
	switch {
	case errors.As(err, &ce):
		g.fail(ce.Kind, err, w)
	case time.Now().After(w.deadline):
		g.fail(pg.ErrTimeout, fmt.Errorf("%v seq %d with rank %d did not finish within the group timeout %v: %w",
			w.op, w.seq, l.key.peer, g.opts.Timeout, err), w)
	case w.ctx.Err() != nil:
		g.fail(pg.ErrTimeout, fmt.Errorf("%v seq %d: its context ended: %w", w.op, w.seq, context.Cause(w.ctx)), w)
	default:
		g.fail(kindOf(err), err, w)
	}
}

// finish completes w unless Group.fail has already.
func (l *lane) finish(w *work, err error) {
	g := l.g
	g.mu.Lock()
	if len(l.ops) == 0 || l.ops[0].w != w {
		g.mu.Unlock()
		return
	}
	l.ops = l.ops[1:]
	g.mu.Unlock()
	w.finish(g, err, time.Now(), time.Time{})
}
