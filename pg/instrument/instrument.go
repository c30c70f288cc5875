package instrument

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/prometheus/client_golang/prometheus"
)

// The op label's values for the five ProcessGroup collectives: the
// String of pg.OpAllReduce and so on. Other ops use their pg.OpType's
// String too.
const (
	OpAllReduce     = "allreduce"
	OpBroadcast     = "broadcast"
	OpAllGather     = "allgather"
	OpReduceScatter = "reducescatter"
	OpBarrier       = "barrier"
)

// queueLen is how many collectives may be in flight before the wrapper
// falls back to one goroutine per extra collective.
const queueLen = 256

// metrics are one wrapped group's series.
type metrics struct {
	seconds, queued *prometheus.HistogramVec
	bytes           *prometheus.CounterVec

	mu  sync.Mutex // guards ops: the hook adds ops as it first sees them
	ops map[string]opMetrics
}

type opMetrics struct {
	seconds, queued prometheus.Observer
	bytes           prometheus.Counter
}

// op returns the series of one op, creating them on first use.
func (m *metrics) op(name string) opMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	om, ok := m.ops[name]
	if !ok {
		om = opMetrics{m.seconds.WithLabelValues(name), m.queued.WithLabelValues(name), m.bytes.WithLabelValues(name)}
		m.ops[name] = om
	}
	return om
}

// observe is the completion hook: it counts the Work's bytes and, if it
// succeeded, times it (a failed one would put its timeout into the
// histograms).
func (m *metrics) observe(info pg.WorkInfo) {
	om := m.op(info.Op.String())
	b := info.InBytes
	if info.Op == pg.OpRecv {
		b = info.OutBytes // a Recv has no input; count what it received
	}
	om.bytes.Add(float64(b))
	if info.Err == nil {
		om.seconds.Observe(info.Duration().Seconds())
		om.queued.Observe(info.QueueDuration().Seconds())
	}
}

// group is the wrapper of a group without completion hooks. See Wrap.
type group struct {
	pg.ProcessGroup
	m *metrics

	mu     sync.Mutex // guards closed and sends on queue
	closed bool
	queue  chan pending
	quit   chan struct{}
	exited chan struct{}
}

type pending struct {
	start time.Time
	w     pg.Work
	m     prometheus.Observer
}

// monitored is the wrapper of a group that offers MonitoredBarrier.
type monitored struct {
	*group
	mb pg.MonitoredBarrierer
}

func (m monitored) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	return m.mb.MonitoredBarrier(ctx, timeout, waitAll)
}

// Wrap returns g with its collectives measured on reg. A nil reg returns
// g itself.
//
// A group that reports its Works (a pg.CompletionHooker, as every backend
// in this module, itself or behind wrappers: see pg.As) is measured by a
// completion hook, and Wrap returns g itself, so every optional interface
// of g (pg.Extended included) stays as it was. Every Work the reporting
// group finishes is measured, also those issued on it directly. Wrap such
// a group once per registry: each Wrap adds a hook.
//
// Any other group is wrapped: its five ProcessGroup collectives are
// timed by a goroutine that Close stops. The wrapper is a pg.Backender,
// and a pg.MonitoredBarrierer exactly when pg.As finds one in g; pg.As
// finds g's other abilities through its Inner, and calls through them
// are not measured.
//
// Registering twice on one registry for the same rank and backend shares
// the series.
func Wrap(g pg.ProcessGroup, reg prometheus.Registerer) (pg.ProcessGroup, error) {
	if reg == nil {
		return g, nil
	}
	labels := prometheus.Labels{"rank": strconv.Itoa(g.Rank()), "backend": pg.BackendName(g)}
	buckets := prometheus.ExponentialBuckets(10e-6, 2, 20)
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ddp_collective_seconds", ConstLabels: labels, Buckets: buckets,
		Help: "Time from issuing a collective to its completion, by operation.",
	}, []string{"op"})
	queued := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ddp_collective_queue_seconds", ConstLabels: labels, Buckets: buckets,
		Help: "Time a collective waited behind earlier ones before its backend started it, by operation.",
	}, []string{"op"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ddp_collective_bytes_total", ConstLabels: labels,
		Help: "Bytes of the input tensors of collectives, by operation.",
	}, []string{"op"})
	var err error
	if seconds, err = register(reg, seconds); err != nil {
		return nil, err
	}
	if bytes, err = register(reg, bytes); err != nil {
		return nil, err
	}
	m := &metrics{seconds: seconds, bytes: bytes, ops: map[string]opMetrics{}}
	// The five ProcessGroup collectives have series from the start, at
	// zero until used.
	var h pg.CompletionHooker
	if pg.As(g, &h) {
		if queued, err = register(reg, queued); err != nil {
			return nil, err
		}
		m.queued = queued
		for _, op := range []string{OpAllReduce, OpBroadcast, OpAllGather, OpReduceScatter, OpBarrier} {
			seconds.WithLabelValues(op)
			bytes.WithLabelValues(op)
		}
		h.OnCompletion(m.observe)
		return g, nil
	}
	for _, op := range []string{OpAllReduce, OpBroadcast, OpAllGather, OpReduceScatter, OpBarrier} {
		m.ops[op] = opMetrics{seconds: seconds.WithLabelValues(op), bytes: bytes.WithLabelValues(op)}
	}
	w := &group{ProcessGroup: g, m: m, queue: make(chan pending, queueLen), quit: make(chan struct{}),
		exited: make(chan struct{})}
	go w.watch()
	var mb pg.MonitoredBarrierer
	if pg.As(g, &mb) {
		return monitored{w, mb}, nil
	}
	return w, nil
}

// register registers c or returns the collector already registered in
// its place.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// track counts a collective's bytes and queues its Work for the watcher.
func (g *group) track(op string, start time.Time, bytes int, w pg.Work) pg.Work {
	m := g.m.ops[op]
	m.bytes.Add(float64(bytes))
	p := pending{start, w, m.seconds}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return w // Close has run: the group fails it at once, nothing to time
	}
	select {
	case g.queue <- p:
	default: // a long queue: time this one on its own
		go p.observe()
	}
	return w
}

// observe waits for the collective and times it if it succeeded: a
// failed one would put its timeout into the histogram.
func (p pending) observe() {
	<-p.w.Done()
	if p.w.Err() == nil {
		p.m.Observe(time.Since(p.start).Seconds())
	}
}

// watch observes each queued collective when it completes, in issue
// order, until Close.
func (g *group) watch() {
	defer close(g.exited)
	for {
		select {
		case p := <-g.queue:
			p.observe()
		case <-g.quit:
			for {
				select {
				case p := <-g.queue:
					p.observe()
				default:
					return
				}
			}
		}
	}
}

// Backend is the wrapped group's backend name.
func (g *group) Backend() string { return pg.BackendName(g.ProcessGroup) }

func (g *group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	start := time.Now()
	return g.track(OpAllReduce, start, t.Bytes(), g.ProcessGroup.AllReduce(ctx, t, op))
}

func (g *group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	start := time.Now()
	return g.track(OpBroadcast, start, t.Bytes(), g.ProcessGroup.Broadcast(ctx, t, root))
}

func (g *group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	start := time.Now()
	return g.track(OpAllGather, start, in.Bytes(), g.ProcessGroup.AllGather(ctx, out, in))
}

func (g *group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	start := time.Now()
	return g.track(OpReduceScatter, start, in.Bytes(), g.ProcessGroup.ReduceScatter(ctx, out, in, op))
}

func (g *group) Barrier(ctx context.Context) pg.Work {
	start := time.Now()
	return g.track(OpBarrier, start, 0, g.ProcessGroup.Barrier(ctx))
}

// Close closes the wrapped group, which fails whatever is still pending,
// then stops the watcher once it has observed every queued collective.
func (g *group) Close() error {
	err := g.ProcessGroup.Close()
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.quit)
	}
	g.mu.Unlock()
	<-g.exited
	return err
}
