package tcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// Group is a TCP process group: one rank of a full mesh of authenticated
// connections. It implements pg.Extended: every collective of c10d's
// Backend, point-to-point Send and Recv, subgroups and completion hooks.
// Its methods are safe for concurrent use, but collectives must be issued
// in the same order on every rank.
type Group struct {
	opts       Options
	rank, size int
	log        *zap.Logger
	st         store.Store // the store New received, where subgroups rendezvous
	parent     []int       // a subgroup's ranks in its parent group; nil for a top group
	links      []*link     // by peer rank; nil at this rank
	shm        *shm.World  // the shared-memory transport; nil when links use TCP only
	hosts      *shm.Layout // the ranks of each host, when the group spans hosts and some has several; else nil
	probes     *probes     // the listener kept for probes, every rank's address; nil for one rank
	byes       *goodbyes   // the peers that closed their groups, for one line (Note [one goodbye line])
	pool       pool
	hooks      backend.Completions

	mu      sync.Mutex
	queue   []*op  // issued, not yet run
	nextSeq uint64 // the sequence number of the next collective issued
	exited  bool   // the executor has stopped

	curSeq   atomic.Uint64 // the collective running or last run
	failure  atomic.Pointer[failure]
	failed   chan struct{} // closed when failure is set
	opKick   chan struct{} // the executor has ops to run (capacity 1)
	stopping chan struct{} // closed by Close
	wake     chan struct{} // a frame arrived, a send finished or a link died (capacity 1)

	readersLeft atomic.Int64
	readersDone chan struct{} // closed when every reader has stopped
	writersLeft atomic.Int64
	writersDone chan struct{} // closed when every writer has sent its final frame

	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ pg.Extended = (*Group)(nil)

// New joins the group: it listens on opts.ListenAddr, publishes its
// address in st, connects to every other rank (dialing the higher ranks,
// accepting the lower ones, authenticating every connection with
// opts.Secret) and returns once the mesh is complete. ctx bounds the
// rendezvous; without a deadline, opts.Timeout does.
func New(ctx context.Context, st store.Store, opts Options) (*Group, error) {
	return newGroup(ctx, st, opts, nil)
}

// newGroup is New for a group whose ranks are parent's in its parent
// group (nil for a top group).
func newGroup(ctx context.Context, st store.Store, opts Options, parent []int) (*Group, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, &pg.CollectiveError{Op: "connect", Rank: opts.Rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	log := opts.Logger.With(zap.Int("rank", opts.Rank))
	conns, pr, err := rendezvous(ctx, st, opts, log)
	if err != nil {
		return nil, (&Group{parent: parent}).annotate(err)
	}
	sw, hosts, err := setupShm(ctx, st, opts, log)
	if err != nil {
		pr.stop()
		closeAll(conns)
		return nil, (&Group{parent: parent}).annotate(err)
	}
	g := &Group{
		opts: opts, rank: opts.Rank, size: opts.Size, log: log, st: st, parent: parent, shm: sw, hosts: hosts, probes: pr,
		byes:        newGoodbyes(log, goodbyeWait),
		links:       make([]*link, opts.Size),
		failed:      make(chan struct{}),
		opKick:      make(chan struct{}, 1),
		stopping:    make(chan struct{}),
		wake:        make(chan struct{}, 1),
		readersDone: make(chan struct{}),
		writersDone: make(chan struct{}),
	}
	g.readersLeft.Store(int64(opts.Size - 1))
	g.writersLeft.Store(int64(opts.Size - 1))
	if opts.Size == 1 {
		close(g.readersDone)
		close(g.writersDone)
	}
	for peer, c := range conns {
		if c != nil {
			g.links[peer] = newLink(g, peer, c)
		}
	}
	for _, l := range g.links {
		if l != nil {
			g.wg.Add(2)
			go l.readLoop()
			go l.writeLoop()
		}
	}
	g.wg.Add(1)
	go g.execute()
	log.Debug("process group ready", zap.Int("size", opts.Size))
	return g, nil
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Backend returns "tcp".
func (g *Group) Backend() string { return "tcp" }

// Abort fails every pending and future collective, Send and Recv with
// pg.ErrAborted (wrapping cause) without waiting for peers, and tells the
// peers, whose pending collectives then fail with pg.ErrRemote naming
// this rank.
func (g *Group) Abort(cause error) {
	if cause == nil {
		cause = errors.New("Abort was called")
	}
	g.fail(&failure{kind: pg.ErrAborted, peer: pg.NoPeer, err: cause}, kindAbort)
}

// Close fails pending collectives, Sends and Recvs with pg.ErrClosed,
// says goodbye to the peers (whose collectives that need this rank then
// fail with pg.ErrRemote), releases every goroutine and socket, and stops
// the completion hooks once they have seen every Work. It is idempotent
// and returns once everything is released. It does not close subgroups.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.fail(&failure{kind: pg.ErrClosed, peer: pg.NoPeer, err: errors.New("Close was called")}, kindGoodbye)
		close(g.stopping)
		g.wg.Wait()
		g.byes.close() // the goodbyes heard before this one: Note [one goodbye line]
		g.probes.stop()
		if g.shm != nil {
			g.shm.Close()
		}
		g.hooks.Close()
	})
	return nil
}

// OnCompletion registers hook, which is called with a pg.WorkInfo for
// every Work the group issues (collectives and Send and Recv) once it has
// finished, in completion order, on one goroutine of the group's. Hooks
// stop with Close.
func (g *Group) OnCompletion(hook func(pg.WorkInfo)) { g.hooks.Register(hook) }

// annotate adds, in a subgroup, the parent rank of the peer an error
// names.
func (g *Group) annotate(err error) error {
	ce, ok := err.(*pg.CollectiveError)
	if !ok || g.parent == nil || ce.Peer < 0 || ce.Peer >= len(g.parent) {
		return err
	}
	c := *ce
	note := fmt.Sprintf("subgroup rank %d is rank %d of the parent group", ce.Peer, g.parent[ce.Peer])
	if c.Err == nil {
		c.Err = errors.New(note)
	} else {
		c.Err = fmt.Errorf("%w (%s)", ce.Err, note)
	}
	return &c
}

// fail records the group's failure (the first wins), tears down every
// link, sending each peer fkind (an abort or a goodbye) as the last
// frame, and wakes the executor. It never blocks.
func (g *Group) fail(f *failure, fkind uint8) bool {
	if !g.failure.CompareAndSwap(nil, f) {
		return false
	}
	close(g.failed)
	if f.kind != pg.ErrClosed {
		g.log.Warn("process group failed", zap.Error(f.errorFor("group", g.rank)))
	}
	var payload []byte
	if fkind == kindAbort || fkind == kindRelay {
		payload = encodeAbort(f)
	}
	for _, l := range g.links {
		if l != nil {
			l.teardown(fkind, payload)
			l.failP2P(func(op string) error { return f.errorFor(op, g.rank) })
		}
	}
	g.signal()
	return true
}

// signal rings the executor's doorbell.
func (g *Group) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// writerOut is called once by each writer when its final frame is out.
func (g *Group) writerOut() {
	if g.writersLeft.Add(-1) == 0 {
		close(g.writersDone)
	}
}

// readerOut is called once by each reader as it stops.
func (g *Group) readerOut() {
	if g.readersLeft.Add(-1) == 0 {
		close(g.readersDone)
	}
}
