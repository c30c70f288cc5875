package local

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Options configure New.
type Options struct {
	// Timeout bounds how long a collective waits for its peers to arrive.
	// Zero means pg.DefaultTimeout.
	Timeout time.Duration
	// Logger receives failures and shutdowns. Nil means no logging.
	Logger *zap.Logger
}

// Group is one rank of an in-process world. It implements pg.Extended
// (every optional ability of a process group) and is safe for use by many
// goroutines.
type Group struct {
	rank    int
	w       *world
	timeout time.Duration
	base    *zap.Logger // Options.Logger, for subgroups
	log     *zap.Logger

	mu       sync.Mutex
	seq      uint64   // number of the last collective issued
	sendSeq  []uint64 // number of the last Send to rank i
	recvSeq  []uint64 // number of the last Recv from rank i
	queue    []*task  // issued, not yet started
	stopKind error    // pg.ErrClosed or pg.ErrAborted once stopped
	stopWhy  error    // Abort's cause
	p2p      sync.WaitGroup

	// hooks runs OnCompletion's hooks. It is a named field, not embedded,
	// so that Deliver is not part of Group's API.
	hooks backend.Completions

	wake   chan struct{} // a task was queued (capacity 1)
	stop   chan struct{} // closed by Close or Abort
	exited chan struct{} // closed when the worker returns
}

var (
	_ pg.ProcessGroup       = (*Group)(nil)
	_ pg.MonitoredBarrierer = (*Group)(nil)
	_ pg.Backender          = (*Group)(nil)
	_ pg.Extended           = (*Group)(nil)
)

// MaxWorldSize is the largest world New makes: 4096 ranks. Every rank
// keeps two sequence numbers per peer, so a world holds 16·n² bytes of
// them (256 MiB at 4096), besides a goroutine per rank; a larger n is a
// mistake that would exhaust memory rather than run.
const MaxWorldSize = 1 << 12

// New starts a world of n ranks in this process and returns them, rank i
// at index i. Each rank runs one worker goroutine until it is closed. n
// is at most MaxWorldSize.
func New(n int, opts Options) ([]*Group, error) {
	if n < 1 || n > MaxWorldSize {
		return nil, fmt.Errorf("local: %w: world size %d, want 1 to %d", pg.ErrInvalidArgument, n, MaxWorldSize)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("local: %w: negative timeout %v", pg.ErrInvalidArgument, opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = pg.DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	w := newWorld(n, nil)
	groups := make([]*Group, n)
	for r := range groups {
		groups[r] = startGroup(w, r, opts.Timeout, opts.Logger)
	}
	return groups, nil
}

// startGroup makes rank r of w and starts its worker.
func startGroup(w *world, r int, timeout time.Duration, base *zap.Logger) *Group {
	log := base.With(zap.String("backend", "local"), zap.Int("rank", r), zap.Int("size", w.n))
	if w.parent != nil {
		log = log.With(zap.Int("parent_rank", w.parent[r]))
	}
	g := &Group{
		rank: r, w: w, timeout: timeout, base: base, log: log,
		sendSeq: make([]uint64, w.n), recvSeq: make([]uint64, w.n),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{}),
	}
	go g.loop()
	return g
}

// Rank is this group's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.w.n }

// Backend returns "local".
func (g *Group) Backend() string { return "local" }

// AllReduce reduces t across ranks in place with op.
func (g *Group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduce(t, op); err != nil {
		return g.invalid(opAllReduce, err)
	}
	d := desc{kind: opAllReduce, dtype: t.Dtype, len: t.Len(), op: op.Kind}
	return g.submit(ctx, &task{desc: d, args: args{in: t, op: op}, timeout: g.timeout})
}

// Broadcast copies root's t into t on every rank.
func (g *Group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	if err := backend.CheckBroadcast(t, root, g.Size()); err != nil {
		return g.invalid(opBroadcast, err)
	}
	d := desc{kind: opBroadcast, dtype: t.Dtype, len: t.Len(), root: root}
	return g.submit(ctx, &task{desc: d, args: args{in: t}, timeout: g.timeout})
}

// AllGather writes rank i's in to chunk i of out on every rank.
func (g *Group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	if err := backend.CheckAllGather(out, in, g.Size()); err != nil {
		return g.invalid(opAllGather, err)
	}
	d := desc{kind: opAllGather, dtype: in.Dtype, len: in.Len()}
	return g.submit(ctx, &task{desc: d, args: args{in: in, out: out}, timeout: g.timeout})
}

// ReduceScatter reduces in across ranks with op and writes chunk Rank()
// of the result to out. in is left unchanged.
func (g *Group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatter(out, in, op, g.Size()); err != nil {
		return g.invalid(opReduceScatter, err)
	}
	d := desc{kind: opReduceScatter, dtype: in.Dtype, len: out.Len(), op: op.Kind}
	return g.submit(ctx, &task{desc: d, args: args{in: in, out: out, op: op}, timeout: g.timeout})
}

// Barrier finishes once every rank has entered it.
func (g *Group) Barrier(ctx context.Context) pg.Work {
	return g.submit(ctx, &task{desc: desc{kind: opBarrier}, timeout: g.timeout})
}

// MonitoredBarrier is a barrier that fails with a *pg.MissingRanksError,
// on every rank that arrived, naming the ranks that did not arrive within
// timeout (all of them, or the lowest only when waitAll is false). A
// timeout of zero or less means the group timeout. It takes its place in
// the issue order like any other collective.
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	if timeout <= 0 {
		timeout = g.timeout
	}
	t := &task{desc: desc{kind: opMonitoredBarrier}, timeout: timeout, waitAll: waitAll}
	w := g.submit(ctx, t)
	if ctx == nil {
		return w.Err()
	}
	select {
	case <-w.Done():
		return w.Err()
	case <-ctx.Done():
		if err := w.Err(); err != nil || isDone(w) {
			return err
		}
		return &pg.CollectiveError{Op: opMonitoredBarrier.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrTimeout,
			Err: context.Cause(ctx)}
	}
}

func isDone(w pg.Work) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

func (g *Group) invalid(op opKind, err error) pg.Work {
	return pg.Completed(fmt.Errorf("local: %v on rank %d: %w", op, g.rank, err))
}

// Abort fails every pending and future collective of this rank with
// pg.ErrAborted, wrapping cause, and makes the peers' collectives fail
// with pg.ErrRemote naming this rank. It does not wait; a collective
// whose arithmetic has already started finishes it first.
func (g *Group) Abort(cause error) { g.halt(pg.ErrAborted, cause) }

// Close is Abort with pg.ErrClosed that also waits for this rank's worker
// and point-to-point calls to end and for the completion hooks to see
// every finished Work. It is idempotent and always returns nil. It does
// not close subgroups.
func (g *Group) Close() error {
	g.halt(pg.ErrClosed, nil)
	<-g.exited
	g.p2p.Wait()
	g.hooks.Close()
	return nil
}

// OnCompletion registers hook to receive a pg.WorkInfo for every Work
// this group finishes from now on: collectives, Send and Recv (not calls
// refused before they were issued, which have Seq 0). Hooks run on one
// goroutine in completion order; Close delivers what is pending and stops
// them.
func (g *Group) OnCompletion(hook func(pg.WorkInfo)) { g.hooks.Register(hook) }

// halt stops the group once: it takes the queue, tells the peers, wakes
// the worker and fails what was queued.
func (g *Group) halt(kind, cause error) {
	g.mu.Lock()
	if g.stopKind != nil {
		g.mu.Unlock()
		return
	}
	g.stopKind, g.stopWhy = kind, cause
	queued := g.queue
	g.queue = nil
	g.mu.Unlock()

	g.log.Debug("process group stopping", zap.Error(kind), zap.NamedError("cause", cause))
	g.w.leave(g.rank, leaveReason(g.w.name(g.rank), kind, cause))
	close(g.stop)
	for _, t := range queued {
		g.complete(t, g.stopped(t.desc.kind))
	}
}

// stopped returns this rank's own error for op after Close or Abort, or
// nil while the group runs.
func (g *Group) stopped(op opKind) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopKind == nil {
		return nil
	}
	return &pg.CollectiveError{Op: op.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: g.stopKind, Err: g.stopWhy}
}
