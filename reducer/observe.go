package reducer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/logger"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/timeline"
	"go.uber.org/zap/zapcore"
)

// Note [observation]
//
// The reducer stamps the events of each iteration (c10d's Timer): the
// start of forward (Prepare), of backward (the DDP wrapper's mark on the
// loss), its end (the tape's end, or Finalize), each gradient's copy into
// its bucket, each bucket's launch, the completion of its communication,
// and Finalize's wait for it. At the end of Finalize it hands them to the
// sinks the Options name: Prometheus metrics, the sampled DDP logging
// data (logger) and the timeline. With none of them set, observation is
// off: the reducer's observer is nopObserver, whose methods do nothing, so
// the live one never asks whether it is on.
//
// The stamps live in slices sized once per bucket plan, so a steady-state
// iteration allocates nothing for them. The completion of a bucket's
// communication is seen by a watcher goroutine (only with metrics or a
// timeline), started by Prepare and ended by Finalize: it waits on each
// Work in launch order, which is the order every backend completes them.

// observer is the reducer's instrumentation; see Note [observation].
// Every method may be called without r.mu.
type observer interface {
	on() bool                               // timings are recorded: engines' backward marks count
	prepare(r *Reducer, sync bool)          // Prepare: an iteration's stamps start
	backwardStarted()                       // the engine's mark, from any goroutine
	backwardEnded()                         // the engine's mark, or Finalize's
	copyStart() int64                       // a gradient's store starts; copied ends it
	copied(i int, start int64)              // parameter i's gradient is in its bucket
	launchStart() int64                     // a bucket's comm hook is called; launched follows
	launched(b int, start int64, w pg.Work) // bucket b's hook returned w
	hookGroup(g pg.ProcessGroup) pg.ProcessGroup
	waitStart() int64                      // Finalize waits for a bucket; waited follows
	waited(b int, s span)                  // Finalize's wait for bucket b took s
	failed(err error)                      // a fatal error
	rebuilt(r *Reducer, order []int)       // the buckets were rebuilt in order
	finish(r *Reducer, sync bool, num int) // an iteration is over
	loggingData() logger.Data
}

// nopObserver is observation off.
type nopObserver struct{}

func (nopObserver) on() bool                                    { return false }
func (nopObserver) prepare(*Reducer, bool)                      {}
func (nopObserver) backwardStarted()                            {}
func (nopObserver) backwardEnded()                              {}
func (nopObserver) copyStart() int64                            { return 0 }
func (nopObserver) copied(int, int64)                           {}
func (nopObserver) launchStart() int64                          { return 0 }
func (nopObserver) launched(int, int64, pg.Work)                {}
func (nopObserver) hookGroup(g pg.ProcessGroup) pg.ProcessGroup { return g }
func (nopObserver) waitStart() int64                            { return 0 }
func (nopObserver) waited(int, span)                            {}
func (nopObserver) failed(error)                                {}
func (nopObserver) rebuilt(*Reducer, []int)                     {}
func (nopObserver) finish(*Reducer, bool, int)                  {}
func (nopObserver) loggingData() logger.Data                    { return logger.Data{} }

// liveObserver is observation on: some sink is set.
type liveObserver struct {
	origin time.Time
	log    *logger.Logger
	m      *metrics         // nil without a Registerer
	tl     *timeline.Writer // nil without a timeline
	hooked bool             // the hook's name has been recorded

	layout     *layout // the plan the per-bucket slices are sized for
	planBytes  int64   // the plan's total bytes
	iterations int     // every iteration, for the timeline

	// ns since origin; 0 is "not recorded".
	bwdStart    atomic.Int64 // written by the tape's goroutine
	fwdStart    int64
	bwdEnd      atomic.Int64 // written by the tape's goroutine (MarkBackwardEnd) or Finalize
	firstLaunch int64
	buckets     []bucketTimes
	copies      []span // per parameter

	wmu      sync.Mutex // watching and the sends on watchCh: a Fail may end the watch from another goroutine
	watching bool
	watchCh  chan watchItem
	watchEnd chan struct{}
}

type span struct{ start, end int64 }

type bucketTimes struct {
	launch   span  // the comm hook's call
	done     int64 // the Work completed
	wait     span  // Finalize waited for it
	launched bool
}

type watchItem struct {
	b int // -1: the iteration is over
	w pg.Work
}

// observe sets up the sinks the options name and logs the construction
// data. It runs at the end of New.
func (r *Reducer) observe() error {
	logs := r.opts.Logger.Core().Enabled(zapcore.InfoLevel) // false for the nil Logger's zap.NewNop
	if r.opts.Registerer == nil && r.opts.Timeline == nil && !logs {
		r.obs = nopObserver{}
		return nil
	}
	o := &liveObserver{origin: time.Now(), tl: r.opts.Timeline}
	if r.opts.Registerer != nil {
		m, err := newMetrics(r.opts.Registerer, r.g)
		if err != nil {
			return err
		}
		o.m = m
	}
	o.log = logger.New(r.opts.Logger, r.construction())
	r.obs = o
	return nil
}

func (r *Reducer) construction() logger.Construction {
	c := logger.Construction{
		WorldSize: r.g.Size(), Rank: r.g.Rank(), Backend: pg.BackendName(r.g), NumParameters: len(r.params),
		BucketCapBytes: r.opts.BucketCapBytes, FirstBucketBytes: r.opts.FirstBucketBytes, BucketSizes: r.layout.bucketBytes(),
		CommHook: commhook.Name(r.hook), FindUnusedParameters: r.opts.FindUnusedParameters, StaticGraph: r.opts.StaticGraph,
		GradientAsBucketView: r.opts.GradientAsBucketView,
	}
	seen := map[string]bool{}
	for i, p := range r.params {
		c.ParameterBytes += int64(r.numel[i] * r.dtypes[i].Size())
		if name := p.Dtype.String(); !seen[name] {
			seen[name] = true
			c.Dtypes = append(c.Dtypes, name)
		}
	}
	return c
}

// LoggingData returns DDP's logging data: the construction data and the
// latest sampled iteration's (c10d's _get_ddp_logging_data). It is empty
// when observation is off (no Logger, Registerer or Timeline).
func (r *Reducer) LoggingData() logger.Data { return r.obs.loggingData() }

func (o *liveObserver) loggingData() logger.Data { return o.log.Data() }

func (o *liveObserver) on() bool { return true }

// now is the time since origin, never 0.
func (o *liveObserver) now() int64 { return int64(time.Since(o.origin)) + 1 }

func (o *liveObserver) at(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return o.origin.Add(time.Duration(ns - 1))
}

func (o *liveObserver) since(s span) time.Duration { return time.Duration(s.end - s.start) }

// prepare starts an iteration's stamps. r.mu is not held: Prepare's
// machine is busy until it returns.
func (o *liveObserver) prepare(r *Reducer, sync bool) {
	if !o.hooked {
		o.hooked = true
		name := commhook.Name(r.hook)
		o.log.SetCommHook(name)
		if o.m != nil {
			o.m.setHook(name)
		}
	}
	if o.layout != r.layout {
		o.setLayout(r)
	}
	o.fwdStart, o.firstLaunch = o.now(), 0
	o.bwdEnd.Store(0)
	o.bwdStart.Store(0)
	clear(o.buckets)
	clear(o.copies)
	if sync && (o.m != nil || o.tl != nil) {
		o.wmu.Lock()
		o.watching = true
		o.wmu.Unlock()
		go o.watch()
	}
}

func (o *liveObserver) setLayout(r *Reducer) {
	o.layout = r.layout
	bytes := r.layout.bucketBytes()
	o.planBytes = 0
	for _, n := range bytes {
		o.planBytes += int64(n)
	}
	o.buckets = make([]bucketTimes, len(bytes))
	o.copies = make([]span, len(r.params))
	o.watchCh = make(chan watchItem, len(bytes)+1)
	o.watchEnd = make(chan struct{}, 1)
	if o.m != nil {
		o.m.setLayout(bytes)
	}
}

// watch records when each launched bucket's Work completes, in launch
// order, until the iteration ends.
func (o *liveObserver) watch() {
	for it := range o.watchCh {
		if it.b < 0 {
			break
		}
		<-it.w.Done()
		o.buckets[it.b].done = o.now()
	}
	o.watchEnd <- struct{}{}
}

// endWatch ends the watcher and, when wait is set, waits for it to have
// recorded every launched bucket.
func (o *liveObserver) endWatch(wait bool) {
	o.wmu.Lock()
	if !o.watching {
		o.wmu.Unlock()
		return
	}
	o.watching = false
	o.watchCh <- watchItem{b: -1} // never blocks: the channel holds a plan's buckets and this
	o.wmu.Unlock()
	if wait {
		<-o.watchEnd
	}
}

// backwardStarted is the DDP wrapper's mark: backward begins. It runs
// on the tape's goroutine.
func (o *liveObserver) backwardStarted() { o.bwdStart.CompareAndSwap(0, o.now()) }

// backwardEnded stamps the end of backward, if nothing did before.
func (o *liveObserver) backwardEnded() { o.bwdEnd.CompareAndSwap(0, o.now()) }

// markBackwardEnd is called by the DDP wrapper when the tape finishes.
func (r *Reducer) markBackwardEnd() {
	r.obs.backwardEnded()
}

// copyStart and copied bracket the copy of parameter i's gradient.
func (o *liveObserver) copyStart() int64 {
	return o.now()
}

func (o *liveObserver) copied(i int, start int64) { o.copies[i] = span{start, o.now()} }

// launchStart and launched bracket the comm hook's call on bucket b.
func (o *liveObserver) launchStart() int64 {
	t := o.now()
	if o.firstLaunch == 0 {
		o.firstLaunch = t
	}
	return t
}

func (o *liveObserver) launched(b int, start int64, w pg.Work) {
	o.buckets[b].launch = span{start, o.now()}
	o.buckets[b].launched = true
	o.wmu.Lock()
	if o.watching {
		o.watchCh <- watchItem{b, w}
	}
	o.wmu.Unlock()
}

// hookGroup is the group the comm hook is given: with metrics, g behind
// a Counter of the bytes the hook hands over. The Counter hides none of
// g's abilities and counts through them (pg.As finds counting views of
// Send, Split and the rest), so a hook runs as it would on g itself.
func (o *liveObserver) hookGroup(g pg.ProcessGroup) pg.ProcessGroup {
	if o.m == nil {
		return g
	}
	return o.m.sent
}

// waitStart and waited bracket Finalize's wait for bucket b.
func (o *liveObserver) waitStart() int64 {
	return o.now()
}

func (o *liveObserver) waited(b int, s span) { o.buckets[b].wait = s }

// failed counts a fatal error and lets the watcher go.
func (o *liveObserver) failed(err error) {
	if o.m != nil {
		o.m.errors.WithLabelValues(errorType(err)).Inc()
	}
	o.endWatch(false)
}

// rebuilt records a bucket rebuild in the given ready order.
func (o *liveObserver) rebuilt(r *Reducer, order []int) {
	if o.m != nil {
		o.m.rebuilds.Inc()
	}
	o.log.SetRebuilt(r.layout.bucketBytes(), r.layout.plan(), order)
}

// unusedBytes are the bytes of the parameters that got no gradient on
// this rank in the iteration just finished.
func (r *Reducer) unusedBytes() int64 {
	var n int64
	for i := range r.params {
		if r.dst[i].Data == nil {
			n += int64(r.numel[i] * r.dtypes[i].Size())
		}
	}
	return n
}

// finish publishes a completed iteration; num, the synchronised
// iterations so far, already counts it when it was synchronised.
func (o *liveObserver) finish(r *Reducer, sync bool, num int) {
	end := o.now()
	o.endWatch(true)
	o.settle()
	o.iterations++
	bwdStart := o.bwdStart.Load()
	if bwdStart == 0 {
		bwdStart = o.fwdStart // forward ran outside DDP: not measured
	}
	if o.m != nil {
		o.observeMetrics(bwdStart, end, sync)
		o.m.copies(r.copies.stats()) // view.go
	}
	if sync && o.log.ShouldSample(num) {
		o.log.Record(logger.Sample{
			Iteration: num, UnusedParameterBytes: r.unusedBytes(),
			ForwardStart: o.at(o.fwdStart), BackwardComputeStart: o.at(bwdStart), BackwardCommStart: o.at(o.firstLaunch),
			BackwardComputeEnd: o.at(o.bwdEnd.Load()), BackwardCommEnd: o.at(end), LastBucketWait: o.lastWait(),
		})
	}
	if o.tl != nil {
		o.trace(r, bwdStart, end, sync)
	}
}

// settle bounds each bucket's completion by the end of Finalize's wait
// for it: the Work was done when Wait returned. The watcher's stamp can
// be later than that by its own wake-up, and is kept only when earlier.
func (o *liveObserver) settle() {
	for b := range o.buckets {
		t := &o.buckets[b]
		if t.wait.end != 0 && (t.done == 0 || t.done > t.wait.end) {
			t.done = t.wait.end
		}
	}
}

func (o *liveObserver) lastWait() time.Duration {
	if len(o.buckets) == 0 {
		return 0
	}
	return o.since(o.buckets[len(o.buckets)-1].wait)
}

func (o *liveObserver) observeMetrics(bwdStart, end int64, sync bool) {
	m := o.m
	m.iterations.Inc()
	if s := o.bwdStart.Load(); s != 0 {
		m.forward.Observe(seconds(s - o.fwdStart))
	}
	bwdEnd := o.bwdEnd.Load()
	m.backwardCompute.Observe(seconds(bwdEnd - bwdStart))
	if !sync || o.firstLaunch == 0 {
		return
	}
	comm := end - o.firstLaunch
	overlap := max(bwdEnd-o.firstLaunch, 0)
	m.backwardComm.Observe(seconds(comm))
	m.commExposed.Observe(seconds(comm - overlap))
	m.lastBucketWait.Observe(o.lastWait().Seconds())
	for b, t := range o.buckets {
		if t.launched && t.done != 0 {
			m.perBucket[b].Observe(seconds(t.done - t.launch.start))
		}
	}
	m.commStep(o.planBytes)
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }
