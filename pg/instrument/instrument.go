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

// Collective names, the values of the op label.
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

// group is the wrapper. See Wrap.
type group struct {
	pg.ProcessGroup
	ops map[string]opMetrics

	mu     sync.Mutex // guards closed and sends on queue
	closed bool
	queue  chan pending
	quit   chan struct{}
	exited chan struct{}
}

type opMetrics struct {
	seconds prometheus.Observer
	bytes   prometheus.Counter
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
// g itself. Registering twice on one registry for the same rank and
// backend shares the series.
func Wrap(g pg.ProcessGroup, reg prometheus.Registerer) (pg.ProcessGroup, error) {
	if reg == nil {
		return g, nil
	}
	labels := prometheus.Labels{"rank": strconv.Itoa(g.Rank()), "backend": pg.BackendName(g)}
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ddp_collective_seconds", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20),
		Help: "Time from issuing a collective to its completion, by operation.",
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
	w := &group{ProcessGroup: g, ops: map[string]opMetrics{}, queue: make(chan pending, queueLen), quit: make(chan struct{}), exited: make(chan struct{})}
	for _, op := range []string{OpAllReduce, OpBroadcast, OpAllGather, OpReduceScatter, OpBarrier} {
		w.ops[op] = opMetrics{seconds.WithLabelValues(op), bytes.WithLabelValues(op)}
	}
	go w.watch()
	if mb, ok := g.(pg.MonitoredBarrierer); ok {
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
	m := g.ops[op]
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
	return g.track(OpAllReduce, start, len(t.Data), g.ProcessGroup.AllReduce(ctx, t, op))
}

func (g *group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	start := time.Now()
	return g.track(OpBroadcast, start, len(t.Data), g.ProcessGroup.Broadcast(ctx, t, root))
}

func (g *group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	start := time.Now()
	return g.track(OpAllGather, start, len(in.Data), g.ProcessGroup.AllGather(ctx, out, in))
}

func (g *group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	start := time.Now()
	return g.track(OpReduceScatter, start, len(in.Data), g.ProcessGroup.ReduceScatter(ctx, out, in, op))
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
