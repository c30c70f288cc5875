package desync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/store"
	"go.uber.org/zap"
)

// DefaultDiagnosisTimeout is how long a diagnosis waits for the other
// ranks' progress when Options sets none.
const DefaultDiagnosisTimeout = 5 * time.Second

// Options configure Wrap.
type Options struct {
	// Name makes the group's store keys unique ("desync/<Name>/...");
	// empty means "world". Subgroups made through the Group derive
	// theirs. Groups sharing a store need distinct names.
	Name string
	// DiagnosisTimeout bounds how long a diagnosis waits for the other
	// ranks; zero means DefaultDiagnosisTimeout.
	DiagnosisTimeout time.Duration
	// CheckCollectives turns on the fingerprint check before every
	// collective, as TORCH_DISTRIBUTED_DEBUG=DETAIL.
	CheckCollectives bool
	// StoreHost is the rank of this group whose process hosts the store
	// (a TCPStore's server: rank 0, the zero value, as c10d's master),
	// named when the store stops answering; pg.NoPeer when no rank of
	// the group does (an in-memory store, or an external one).
	StoreHost int
	// ProbeTimeout bounds a diagnosis's network probes of the other
	// ranks (pg's Note [network or process]), made when the wrapped
	// group can probe (backend.PeerProber); zero means DefaultProbeTimeout,
	// and it is at most DiagnosisTimeout.
	ProbeTimeout time.Duration
	// Logger receives the diagnosis; nil means none.
	Logger *zap.Logger

	parentRanks []int // a subgroup's members' ranks in the parent group
	sub         bool  // made by NewGroup or Split
	lateProbes  bool  // tests: probe as a group too large to probe early does
}

// Group is a process group wrapped for desync diagnosis. It implements
// pg.Extended itself, so that every collective passes its checks, by
// delegating to what pg.As finds in the wrapped group (through any
// wrappers of it); abilities the wrapped group lacks fail with
// pg.ErrUnsupported. Inner returns the wrapped group, for pg.As to find
// what a Group does not implement (backend.DeviceBucketAllocator). See pg's
// Note [wrappers keep abilities].
type Group struct {
	inner pg.ProcessGroup
	base  store.Store // the store Wrap was given, for subgroups
	st    store.Store // base under this group's prefix
	opts  Options
	rank  int
	size  int
	log   *zap.Logger

	issueMu   sync.Mutex // serialises issue, so seq order is issue order
	seq       uint64     // last collective number given out
	subgroups int        // NewGroup and Split calls so far, for subgroup names

	mu        sync.Mutex
	prog      progress
	pending   []item // issued without the check and not yet seen finished, in order
	published bool   // this rank's progress is in the store

	// life ends at Close: it stops the responder and bounds diagnoses.
	life   context.Context
	cancel context.CancelFunc

	// With CheckCollectives: collectives waiting for the check, and
	// those issued after it, waited for in order by the monitor.
	mon  queue[item]
	jobs queue[job]

	diagMu    sync.Mutex
	diagDone  chan struct{}       // closed when the diagnosis is over; nil before it starts
	diag      *pg.StallError      // the group's diagnosis, once made
	closing   bool                // Close has begun: no diagnosis starts
	hooks     backend.Completions // with CheckCollectives: the completion hooks
	closeOnce sync.Once
	closeErr  error
	workers   sync.WaitGroup // responder, diagnosis
	monDone   chan struct{}
	jobsDone  chan struct{}
}

var _ pg.Extended = (*Group)(nil)

// Wrap returns g wrapped for desync diagnosis over st, which every rank
// of g must share (the rendezvous store). The Group owns g: closing it
// closes g. st must outlive the Group; Close does not close it.
func Wrap(g pg.ProcessGroup, st store.Store, opts Options) (*Group, error) {
	if g == nil || st == nil {
		return nil, fmt.Errorf("desync: %w: Wrap needs a group and a store", pg.ErrInvalidArgument)
	}
	if opts.DiagnosisTimeout < 0 {
		return nil, fmt.Errorf("desync: %w: negative diagnosis timeout %v", pg.ErrInvalidArgument, opts.DiagnosisTimeout)
	}
	if opts.DiagnosisTimeout == 0 {
		opts.DiagnosisTimeout = DefaultDiagnosisTimeout
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	opts.ProbeTimeout = min(opts.ProbeTimeout, opts.DiagnosisTimeout)
	if opts.Name == "" {
		opts.Name = "world"
	}
	if opts.StoreHost < pg.NoPeer || opts.StoreHost >= g.Size() {
		opts.StoreHost = pg.NoPeer
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	life, cancel := context.WithCancel(context.Background())
	w := &Group{
		inner: g, base: st, st: store.NewPrefixStore("desync/"+opts.Name, st), opts: opts,
		rank: g.Rank(), size: g.Size(),
		log:  log.With(zap.String("group", opts.Name), zap.Int("rank", g.Rank())),
		life: life, cancel: cancel,
		monDone: make(chan struct{}), jobsDone: make(chan struct{}),
	}
	w.mon.init()
	w.jobs.init()
	if opts.CheckCollectives {
		w.log.Info("desync: every collective is checked across ranks before it is issued (as TORCH_DISTRIBUTED_DEBUG=DETAIL)")
		go w.monitor()
		go w.checker()
	} else {
		close(w.monDone)
		close(w.jobsDone)
	}
	w.workers.Add(1)
	go w.respond()
	return w, nil
}

// Inner returns the wrapped group (pg.Wrapper).
func (g *Group) Inner() pg.ProcessGroup { return g.inner }

// Rank is this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Backend returns the wrapped group's backend name.
func (g *Group) Backend() string { return pg.BackendName(g.inner) }

// Abort aborts the wrapped group.
func (g *Group) Abort(cause error) { g.inner.Abort(cause) }

// Close closes the wrapped group, fails what is still queued, and stops
// the Group's goroutines. It is idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.diagMu.Lock()
		g.closing = true
		g.diagMu.Unlock()
		g.cancel() // stops the responder; ends a diagnosis in progress
		g.closeErr = g.inner.Close()
		g.jobs.close()
		<-g.jobsDone // every queued job has reached the monitor
		g.mon.close()
		<-g.monDone
		g.hooks.Close()
		g.workers.Wait()
	})
	return g.closeErr
}

// OnCompletion registers hook with the wrapped group, if it reports
// completions (otherwise the hook is never called); with
// CheckCollectives, the Group reports its collectives itself, with its
// own numbering and without the checks' allgathers, and passes hooks for
// Send and Recv to the wrapped group.
func (g *Group) OnCompletion(hook func(pg.WorkInfo)) {
	var h pg.CompletionHooker
	ok := pg.As(g.inner, &h)
	if !g.opts.CheckCollectives {
		if ok {
			h.OnCompletion(hook)
		}
		return
	}
	g.hooks.Register(hook)
	if ok && hook != nil {
		h.OnCompletion(func(info pg.WorkInfo) {
			if info.Op.IsPointToPoint() {
				hook(info)
			}
		})
	}
}

func (g *Group) unsupported(op pg.OpType) pg.Work {
	return pg.Completed(&pg.CollectiveError{Op: op.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrUnsupported,
		Err: fmt.Errorf("the %s backend has no %v", g.Backend(), op)})
}

func (g *Group) closedErr(op pg.OpType) error {
	return &pg.CollectiveError{Op: op.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrClosed}
}

// AllReduce implements pg.ProcessGroup.
func (g *Group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduce(t, op, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, withOp(fpOf(pg.OpAllReduce, t, noRoot), op), sized(t.Dtype, t, t),
		func(ctx context.Context) pg.Work {
			return g.inner.AllReduce(ctx, t, op)
		})
}

// Broadcast implements pg.ProcessGroup.
func (g *Group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	if err := backend.CheckBroadcast(t, root, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpOf(pg.OpBroadcast, t, root), sized(t.Dtype, t, t), func(ctx context.Context) pg.Work {
		return g.inner.Broadcast(ctx, t, root)
	})
}

// AllGather implements pg.ProcessGroup.
func (g *Group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	if err := backend.CheckAllGather(out, in, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpOf(pg.OpAllGather, in, noRoot), sized(in.Dtype, in, out), func(ctx context.Context) pg.Work {
		return g.inner.AllGather(ctx, out, in)
	})
}

// ReduceScatter implements pg.ProcessGroup.
func (g *Group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatter(out, in, op, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, withOp(fpOf(pg.OpReduceScatter, out, noRoot), op), sized(in.Dtype, in, out),
		func(ctx context.Context) pg.Work {
			return g.inner.ReduceScatter(ctx, out, in, op)
		})
}

// Barrier implements pg.ProcessGroup.
func (g *Group) Barrier(ctx context.Context) pg.Work {
	return g.issue(ctx, fingerprint{op: pg.OpBarrier, root: noRoot}, sizes{}, func(ctx context.Context) pg.Work {
		return g.inner.Barrier(ctx)
	})
}

// Reduce implements pg.Rooted.
func (g *Group) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	var r pg.Rooted
	if !pg.As(g.inner, &r) {
		return g.unsupported(pg.OpReduce)
	}
	if err := backend.CheckReduce(t, root, op, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, withOp(fpOf(pg.OpReduce, t, root), op), sized(t.Dtype, t, t), func(ctx context.Context) pg.Work {
		return r.Reduce(ctx, t, root, op)
	})
}

// Gather implements pg.Rooted.
func (g *Group) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	var r pg.Rooted
	if !pg.As(g.inner, &r) {
		return g.unsupported(pg.OpGather)
	}
	if err := backend.CheckGather(out, in, root, g.rank, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpOf(pg.OpGather, in, root), rootSized(in.Dtype, in, out, g.rank == root, true),
		func(ctx context.Context) pg.Work {
			return r.Gather(ctx, out, in, root)
		})
}

// Scatter implements pg.Rooted.
func (g *Group) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	var r pg.Rooted
	if !pg.As(g.inner, &r) {
		return g.unsupported(pg.OpScatter)
	}
	if err := backend.CheckScatter(out, in, root, g.rank, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpOf(pg.OpScatter, out, root), rootSized(out.Dtype, in, out, g.rank == root, false),
		func(ctx context.Context) pg.Work {
			return r.Scatter(ctx, out, in, root)
		})
}

// AllToAll implements pg.AllToAller.
func (g *Group) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	var a pg.AllToAller
	if !pg.As(g.inner, &a) {
		return g.unsupported(pg.OpAllToAll)
	}
	outS, inS, err := backend.CheckAllToAll(out, in, outSplits, inSplits, g.size, backend.AcceptDevice)
	if err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpAllToAll(g.rank, in.Dtype, outS, inS), sized(in.Dtype, in, out),
		func(ctx context.Context) pg.Work {
			return a.AllToAll(ctx, out, in, outSplits, inSplits)
		})
}

// Send implements pg.PointToPoint. Point-to-point calls are passed
// through: they are neither fingerprinted nor diagnosed.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	var p pg.PointToPoint
	if !pg.As(g.inner, &p) {
		return g.unsupported(pg.OpSend)
	}
	return p.Send(ctx, t, dst, tag)
}

// Recv implements pg.PointToPoint, passed through as Send.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	var p pg.PointToPoint
	if !pg.As(g.inner, &p) {
		return g.unsupported(pg.OpRecv)
	}
	return p.Recv(ctx, t, src, tag)
}

// AllReduceCoalesced implements pg.Coalescer.
func (g *Group) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	var c pg.Coalescer
	if !pg.As(g.inner, &c) {
		return g.unsupported(pg.OpAllReduceCoalesced)
	}
	if err := backend.CheckAllReduceCoalesced(ts, op, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpCoalesced(pg.OpAllReduceCoalesced, ts, op), coalescedSize(nil, ts),
		func(ctx context.Context) pg.Work {
			return c.AllReduceCoalesced(ctx, ts, op)
		})
}

// AllGatherCoalesced implements pg.Coalescer.
func (g *Group) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	var c pg.Coalescer
	if !pg.As(g.inner, &c) {
		return g.unsupported(pg.OpAllGatherCoalesced)
	}
	if err := backend.CheckAllGatherCoalesced(outs, ins, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpCoalesced(pg.OpAllGatherCoalesced, ins, pg.ReduceOp{}), coalescedSize(outs, ins),
		func(ctx context.Context) pg.Work {
			return c.AllGatherCoalesced(ctx, outs, ins)
		})
}

// ReduceScatterCoalesced implements pg.Coalescer.
func (g *Group) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	var c pg.Coalescer
	if !pg.As(g.inner, &c) {
		return g.unsupported(pg.OpReduceScatterCoalesced)
	}
	if err := backend.CheckReduceScatterCoalesced(outs, ins, op, g.size, backend.AcceptDevice); err != nil {
		return pg.Completed(err)
	}
	return g.issue(ctx, fpCoalesced(pg.OpReduceScatterCoalesced, ins, op), coalescedSize(outs, ins),
		func(ctx context.Context) pg.Work {
			return c.ReduceScatterCoalesced(ctx, outs, ins, op)
		})
}

// sizes is what a completion hook reports of a collective's buffers.
type sizes struct {
	dtype   pg.Dtype
	in, out int64
}

func sized(d pg.Dtype, in, out pg.Tensor) sizes {
	return sizes{d, int64(in.Bytes()), int64(out.Bytes())}
}

// rootSized counts only the buffers a rooted collective uses: Gather's
// out and Scatter's in on the root alone.
func rootSized(d pg.Dtype, in, out pg.Tensor, isRoot, gather bool) sizes {
	s := sized(d, in, out)
	switch {
	case isRoot:
	case gather:
		s.out = 0
	default:
		s.in = 0
	}
	return s
}

func coalescedSize(outs, ins []pg.Tensor) sizes {
	var s sizes
	for i, t := range ins {
		if i == 0 {
			s.dtype = t.Dtype
		}
		s.in += int64(t.Bytes())
		if outs != nil {
			s.out += int64(outs[i].Bytes())
		} else {
			s.out += int64(t.Bytes())
		}
	}
	return s
}

// MonitoredBarrier implements pg.MonitoredBarrierer: after the
// collectives issued before it (with CheckCollectives, once they have
// passed the check), it runs the wrapped group's monitored barrier. It is
// not fingerprinted: it already names missing ranks.
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	var m pg.MonitoredBarrierer
	if !pg.As(g.inner, &m) {
		return g.unsupported(pg.OpMonitoredBarrier).Err()
	}
	if err := backend.CheckContext(ctx); err != nil {
		return err
	}
	g.issueMu.Lock()
	defer g.issueMu.Unlock()
	if err := g.drain(ctx); err != nil {
		return err
	}
	return m.MonitoredBarrier(ctx, timeout, waitAll)
}

// NewGroup implements pg.Splitter. The subgroup is wrapped too, with
// this Group's options and its own store prefix; its diagnoses name
// ranks with their rank in this group.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	var s pg.Splitter
	if !pg.As(g.inner, &s) {
		return nil, g.unsupported(pg.OpAllGather).Err()
	}
	return g.split(ctx, ranks, func(ctx context.Context) (pg.ProcessGroup, error) { return s.NewGroup(ctx, ranks) })
}

// Split implements pg.Splitter; the subgroup is wrapped as NewGroup's.
// To know the members' parent ranks, the ranks first allgather their
// (color, key) through this Group: one more collective, with its own
// sequence number.
func (g *Group) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	var s pg.Splitter
	if !pg.As(g.inner, &s) {
		return nil, g.unsupported(pg.OpAllGather).Err()
	}
	if color < pg.NoColor { // refused here, before the allgather
		return nil, fmt.Errorf("desync: %w: split color %d is negative; pass pg.NoColor to stay out", pg.ErrInvalidArgument,
			color)
	}
	if err := backend.CheckContext(ctx); err != nil {
		return nil, err
	}
	all := make([]int64, 2*g.size)
	if err := g.AllGather(ctx, pg.Int64s(all), pg.Int64s([]int64{int64(color), int64(key)})).Wait(ctx); err != nil {
		return nil, err
	}
	var members []int
	for r := range g.size {
		if color != pg.NoColor && all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(all[2*a+1], all[2*b+1]) })
	return g.split(ctx, members, func(ctx context.Context) (pg.ProcessGroup, error) { return s.Split(ctx, color, key) })
}

// split makes a subgroup whose members are parent ranks members (in
// subgroup rank order) and wraps it.
func (g *Group) split(ctx context.Context, members []int,
	create func(context.Context) (pg.ProcessGroup, error)) (pg.ProcessGroup, error) {
	if err := backend.CheckContext(ctx); err != nil {
		return nil, err
	}
	g.issueMu.Lock()
	defer g.issueMu.Unlock()
	if err := g.drain(ctx); err != nil {
		return nil, err
	}
	g.subgroups++ // on every rank, member or not, so names agree
	name := fmt.Sprintf("%s/%d", g.opts.Name, g.subgroups)
	sub, err := create(ctx)
	if err != nil || sub == nil {
		return nil, err
	}
	if len(members) != sub.Size() { // the backend disagrees; name subgroup ranks only
		members = nil
	}
	opts := g.opts
	opts.Name, opts.StoreHost, opts.parentRanks, opts.sub = name, pg.NoPeer, members, true
	for i, r := range members {
		if r == g.opts.StoreHost {
			opts.StoreHost = i
		}
	}
	w, err := Wrap(sub, g.base, opts)
	if err != nil {
		return nil, errors.Join(err, sub.Close())
	}
	return w, nil
}
