package reducer

import (
	"errors"
	"fmt"
	"slices"

	"github.com/goddp/ddp/pg"
)

// Note [events in, actions out]
//
// Every decision the reducer makes lives in machine: whether a call is
// allowed now, whether a gradient is acceptable (its dtype and size, a
// device gradient where device buckets serve), which bucket launches
// next, when unused parameters are marked, when the buckets are rebuilt,
// what StaticGraph's first iteration does, when an accumulation window
// opens and closes, whether replicas may differ under a Join, and what
// the end of an iteration reports. machine is a plain state machine in the
// style of etcd's raft RawNode: it holds no lock, no goroutine, no clock
// and no process group. It has one entry, step: the Reducer (the driver)
// feeds it one event (events.go) under r.mu and gets back the actions
// (actions.go) to perform, appended to a slice the driver owns. The driver
// performs them with r.mu released, every kind in one switch (perform), so
// no lock is ever held across a wait, a comm hook, a device copy or an
// observer call (Note [no lock across a wait]). The driver reads the
// machine only through status, a value snapshot.
//
// The iteration is a phase, not a set of flags:
//
//	idle ──begin(sync=false)──▶ busy ──began──▶ local ──finish──▶ idle
//	idle ──begin(sync=true)───▶ busy ──began──▶ syncing ──finish──▶ busy ──waited, done──▶ idle
//	                                        └─▶ counting (StaticGraph's first) ┘
//	any ──fail──▶ failed (terminal)
//
// busy covers what Prepare and Finalize do with the lock released: the
// rebuild's broadcast, the device twins' setup, the waits and the write
// back. Only read-only calls and Fail are taken while busy. Three things
// persist across iterations besides the phase: the accumulation window (a
// no-sync iteration opened it; the next synchronised one closes it), the
// rebuild's stage (waiting → recording → recorded → done), and whether
// some rank has joined (Join).

// phase is where the reducer stands in the iteration cycle.
type phase uint8

const (
	phaseIdle     phase = iota // between iterations
	phaseBusy                  // Prepare or Finalize performs its actions without the lock
	phaseLocal                 // a no-sync iteration: gradients go into the buckets, nothing launches
	phaseCounting              // StaticGraph's first synchronised iteration: all launch at Finalize (delay_all_reduce)
	phaseSyncing               // a synchronised iteration: buckets launch as they fill, in order
	phaseFailed                // a fatal error: every later call returns it
)

func (p phase) String() string {
	switch p {
	case phaseIdle:
		return "idle"
	case phaseBusy:
		return "busy"
	case phaseLocal:
		return "local"
	case phaseCounting:
		return "counting"
	case phaseSyncing:
		return "syncing"
	}
	return "failed"
}

// rebuildStage follows c10d's bucket rebuild: record the order in which
// gradients become ready during one synchronised iteration, then, before
// the next one, rebuild the buckets in that order. Once per run.
type rebuildStage uint8

const (
	rebuildWaiting   rebuildStage = iota // the next synchronised iteration (not StaticGraph's first) records
	rebuildRecording                     // this iteration records the ready order
	rebuildRecorded                      // the next synchronised iteration's Prepare rebuilds
	rebuildDone                          // rebuilt, or the options never rebuild
)

func (s rebuildStage) String() string {
	return [...]string{"waiting", "recording", "recorded", "done"}[s]
}

// twinState is what device twins serve the current bucket plan.
type twinState uint8

const (
	twinsNone  twinState = iota // none: a device gradient has nowhere to go
	twinsPlain                  // plain device memory, while a rebuild is still to come
	twinsFinal                  // registered with NCCL as the group's policy says; kept for the run
)

// machine is the reducer's decisions: Note [events in, actions out].
type machine struct {
	params      []Param
	dtypes      []pg.Dtype // per parameter, the gradients' dtype
	numel       []int
	rank        int
	findUnused  bool
	static      bool
	checkFinite bool
	findOrigin  bool // Options.FindNonFiniteOrigin

	phase  phase
	resume phase  // busy: the phase its actions lead to
	busyIn string // busy: "Prepare" or "Finalize"
	err    error  // failed: why

	t            *tracker
	window       bool    // an accumulation window is open (a no-sync iteration ran)
	used         []int32 // per parameter: got a gradient in this window; the driver allreduces it
	unused       []int   // this iteration's unused parameters
	unusedMarked bool    // they have been marked ready
	num          int     // completed synchronised iterations
	origin       bool    // this synchronised iteration's ranks found a NaN before a collective
	othersJoined bool    // under a Join, some rank has run out of inputs: replicas differ until Finish

	devices    bool      // the group keeps device buckets: Note [device buckets]
	twins      twinState // the device twins that serve the current plan
	installing twinState // busy in Prepare: the twins its install action makes; none: no install

	stage    rebuildStage
	order    []int // the recorded ready order
	complete []int // order completed to cover every parameter, once recorded

	first        bool   // StaticGraph: the first synchronised iteration has not finished
	staticUnused []bool // StaticGraph, after its first iteration: no gradient there on this rank
	staticList   []int
	globalUnused []bool // no rank used it in the last synchronised iteration; nil: all used

	out []action // during step only: the caller's slice, appended to
}

// newMachine starts the machine on plan. used is the driver's buffer for
// the used map, which the machine fills and the driver allreduces.
// devices says whether the group keeps device buckets.
func newMachine(params []Param, dtypes []pg.Dtype, rank int, o Options, plan [][]int, used []int32,
	devices bool) *machine {
	m := &machine{
		params: params, dtypes: dtypes, numel: make([]int, len(params)), rank: rank, devices: devices,
		findUnused: o.FindUnusedParameters, static: o.StaticGraph, checkFinite: o.CheckFinite,
		findOrigin: o.FindNonFiniteOrigin,
		used:       used, first: o.StaticGraph, stage: rebuildDone,
	}
	for i, p := range params {
		m.numel[i] = p.Numel()
	}
	if o.rebuilds() {
		m.stage = rebuildWaiting
	}
	m.t = newTracker(plan, len(params))
	return m
}

// step is the machine's one entry: it takes ev and appends the actions to
// perform, in order, to dst. A refused event appends nothing and returns
// dst with the error; so does an event that fails the machine, whose
// error every later event returns.
func (m *machine) step(ev event, dst []action) ([]action, error) {
	m.out = dst
	err := m.take(ev)
	out := m.out
	m.out = nil
	if err != nil {
		return dst, err
	}
	return out, nil
}

func (m *machine) take(ev event) error {
	switch e := ev.(type) {
	case evBegin:
		return m.begin(e.sync, e.unused)
	case evBegan:
		m.installed(e.hostOnly)
		return m.leaveBusy()
	case evReady:
		return m.ready(e)
	case evFinish:
		return m.finish()
	case evWaited:
		return m.waited(e.globalUsed, e.origin)
	case evDone:
		return m.done()
	case evFail:
		return m.fail(e.err)
	case evReplanned:
		m.t = newTracker(e.plan, len(m.params))
		m.twins = twinsNone // they were made for the old plan
		return nil
	case evJoin:
		m.othersJoined = e.othersJoined
		return nil
	}
	return errors.New("reducer: internal error: an event the machine has no step for")
}

func (m *machine) emit(a action) { m.out = append(m.out, a) }

// usable says why an event that changes the iteration cannot be taken now.
func (m *machine) usable() error { return m.status().usable() }

// fail moves to failed; the first error is the one every later call gets.
func (m *machine) fail(err error) error {
	if m.phase != phaseFailed {
		m.phase, m.err = phaseFailed, err
	}
	return m.err
}

// begin is Prepare. Its actions (a rebuild, the device twins) run before
// began opens the iteration.
func (m *machine) begin(sync bool, unused []int) error {
	if err := m.usable(); err != nil {
		return err
	}
	if m.phase == phaseCounting || m.phase == phaseSyncing {
		if missing := m.t.missing(); len(missing) > 0 {
			return m.fail(m.unfinishedError(missing))
		}
		return m.fail(fmt.Errorf("%w: Finalize was not called after the previous backward; "+
			"call it after every backward pass", ErrUnfinishedReduction))
	}
	if err := m.checkUnused(unused); err != nil {
		return err
	}
	next := phaseLocal
	if sync {
		next = phaseSyncing
		if m.first {
			next = phaseCounting
		}
		m.planRebuild()
		m.planTwins()
	}
	m.t.reset()
	if !m.window {
		clear(m.used)
	}
	m.unused, m.unusedMarked = unused, false
	if m.static {
		m.unused = m.staticList
	}
	m.phase, m.resume, m.busyIn = phaseBusy, next, "Prepare"
	return nil
}

// planRebuild, at the start of a synchronised iteration, rebuilds when an
// order was recorded, or starts recording one. StaticGraph's first
// iteration records nothing: its gradients only count.
func (m *machine) planRebuild() {
	switch {
	case m.stage == rebuildRecorded:
		// The driver overwrites the order with rank 0's: it gets a copy.
		m.emit(action{kind: actRebuild, order: slices.Clone(m.complete), carry: m.window})
		m.stage = rebuildDone // m.complete stays, for readyOrder
	case m.stage == rebuildWaiting && !m.first:
		m.stage, m.order = rebuildRecording, m.order[:0]
	}
}

// planTwins, after any rebuild, installs the device twins of the current
// plan unless the ones there serve: plain ones while a rebuild is still to
// come, registered ones (final) from then on, once.
func (m *machine) planTwins() {
	want := twinsPlain
	if m.stage == rebuildDone {
		want = twinsFinal
	}
	if !m.devices || m.twins == twinsFinal || m.twins == want {
		return
	}
	m.installing = want
	m.emit(action{kind: actInstallDevice, final: want == twinsFinal})
}

// installed follows Prepare's install: the twins it made serve the plan,
// or, hostOnly, the comm hook has no device form, so the buckets stay on
// the host for the rest of the run.
func (m *machine) installed(hostOnly bool) {
	switch {
	case hostOnly:
		m.devices, m.twins = false, twinsNone
	case m.installing != twinsNone:
		m.twins = m.installing
	}
	m.installing = twinsNone
}

// completeOrder is the recorded order with, last index first, any
// parameter the recording missed (one that got no gradient, under
// StaticGraph), so that it covers every parameter.
func (m *machine) completeOrder() []int {
	seen := make([]bool, len(m.params))
	order := make([]int, 0, len(m.params))
	for _, p := range m.order {
		if !seen[p] {
			seen[p] = true
			order = append(order, p)
		}
	}
	for p := len(m.params) - 1; p >= 0; p-- {
		if !seen[p] {
			order = append(order, p)
		}
	}
	return order
}

// leaveBusy ends Prepare's or Finalize's busy phase: began and done. A
// Fail that came in meanwhile wins.
func (m *machine) leaveBusy() error {
	if m.phase == phaseBusy {
		m.phase = m.resume
	}
	if m.phase == phaseFailed {
		return m.err
	}
	return nil
}

// syncing reports whether the iteration in progress is synchronised.
func (m *machine) syncing() bool { return m.phase == phaseSyncing || m.phase == phaseCounting }

// ready is MarkReady of parameter e.param: the gradient is checked, then
// stored, and what it completes launches.
func (m *machine) ready(e evReady) error {
	if err := m.accepts(e); err != nil {
		return err
	}
	i := e.param
	if m.syncing() && m.staticUnused != nil && m.staticUnused[i] {
		return m.fail(fmt.Errorf("%w, e.g., one parameter is unused in the first iteration but then got used in the "+
			"second (parameter %d, %s). This is not compatible with StaticGraph", ErrGraphChanged, i, m.params[i].Name))
	}
	if m.t.isReady(i) {
		return m.fail(m.markedTwiceError(i))
	}
	m.used[i] = 1
	m.emit(action{kind: actStore, param: i, sum: m.window})
	if m.phase != phaseSyncing {
		m.t.markOnly(i) // no communication now: see finish
		return nil
	}
	m.markUnused()
	if m.stage == rebuildRecording {
		m.order = append(m.order, i)
	}
	m.emit(action{kind: actUpload, param: i})
	m.markReady(i)
	return nil
}

// accepts says whether a gradient for parameter e.param can be taken now,
// refusing without a change.
func (m *machine) accepts(e evReady) error {
	i := e.param
	if err := m.usable(); err != nil {
		return err
	}
	if m.phase == phaseIdle {
		return fmt.Errorf("reducer: gradient for parameter %d (%s) arrived outside an iteration; "+
			"call Prepare before backward", i, m.nameOf(i))
	}
	if i < 0 || i >= len(m.params) {
		return fmt.Errorf("%w: parameter index %d is out of range [0, %d)", ErrBadGradient, i, len(m.params))
	}
	grad := e.grad
	if grad.Dtype != m.dtypes[i] || grad.Len() != m.numel[i] || len(grad.Data)%max(grad.Dtype.Size(), 1) != 0 {
		return fmt.Errorf("%w: parameter %d (%s) expects a %v gradient of %d elements (shape %v), got %v with %d elements",
			ErrBadGradient, i, m.params[i].Name, m.dtypes[i], m.numel[i], m.params[i].Shape, grad.Dtype, grad.Len())
	}
	if grad.IsDevice() {
		return m.acceptsDevice(e)
	}
	return nil
}

// acceptsDevice refuses the device gradients the reducer cannot take.
func (m *machine) acceptsDevice(e evReady) error {
	i := e.param
	switch {
	case !m.devices:
		return fmt.Errorf("%w: parameter %d (%s) has a device gradient, but the process group keeps no device buckets "+
			"(use an NCCL group without HostBuckets, or copy the gradient to the host)", ErrBadGradient, i, m.params[i].Name)
	case !m.syncing() || m.window:
		return fmt.Errorf("%w: parameter %d (%s): device gradients cannot accumulate across no_sync iterations; "+
			"accumulate on the device and pass the sum in a synchronised iteration", ErrBadGradient, i, m.params[i].Name)
	case m.twins == twinsNone:
		return fmt.Errorf("%w: parameter %d (%s): a device gradient before the device buckets exist "+
			"(in the first static-graph iteration?)", ErrBadGradient, i, m.params[i].Name)
	}
	return nil
}

// markReady marks parameter i ready and launches what that completes.
func (m *machine) markReady(i int) {
	from, to, _ := m.t.markReady(i)
	for b := from; b < to; b++ {
		m.emit(action{kind: actLaunch, bucket: b, screen: m.findOrigin})
	}
}

// markUnused marks this iteration's unused parameters ready, once, with
// zero gradients (or, inside a window, with what they hold so far), as
// c10d does at the first gradient hook.
func (m *machine) markUnused() {
	if m.unusedMarked {
		return
	}
	m.unusedMarked = true
	for _, i := range m.unused {
		if m.t.isReady(i) {
			continue // it produced a gradient after all; ready reports that
		}
		if !m.window {
			m.emit(action{kind: actZero, param: i})
		}
		m.markReady(i)
	}
}

// finish is Finalize. A no-sync iteration ends at once; a synchronised
// one launches what is left and goes busy until waited and done.
func (m *machine) finish() error {
	if err := m.usable(); err != nil {
		return err
	}
	switch m.phase {
	case phaseIdle:
		return errors.New("reducer: Finalize without Prepare; call Prepare before each backward pass and Finalize after it")
	case phaseLocal:
		m.endLocal()
		return nil
	case phaseCounting:
		m.launchFirst()
	}
	m.markUnused()
	if !m.t.allLaunched() {
		return m.fail(m.unfinishedError(m.t.missing()))
	}
	reduceUsed := m.findUnused && !m.static
	m.emit(action{kind: actWait, reduceUsed: reduceUsed}) // Note [used map after the buckets]
	if m.findOrigin {
		// After the wait, on the used map's allreduce when there is one: Note [where the NaN began].
		m.emit(action{kind: actAgreeOrigin, ownAllreduce: !reduceUsed})
	}
	m.phase, m.resume, m.busyIn = phaseBusy, phaseIdle, "Finalize"
	return nil
}

// endLocal closes a no-sync iteration. The first iteration of a window
// copied gradients into the buckets; the slots it did not reach are
// zeroed so that later iterations can add to them.
func (m *machine) endLocal() {
	if !m.window {
		for i := range m.params {
			if !m.t.isReady(i) {
				m.emit(action{kind: actZero, param: i})
			}
		}
	}
	m.window = true
	m.phase = phaseIdle
}

// launchFirst is c10d's delay_all_reduce: StaticGraph's first iteration
// communicates nothing during backward. At its end the unused set is
// known: the used map's allreduce starts, those parameters are marked
// ready with zero gradients, and every bucket launches.
func (m *machine) launchFirst() {
	m.staticUnused = make([]bool, len(m.params))
	m.staticList = nil
	for i, u := range m.used {
		if u == 0 {
			m.staticUnused[i] = true
			m.staticList = append(m.staticList, i)
		}
	}
	m.emit(action{kind: actReduceUsed, unused: m.staticList})
	m.t.reset()
	m.unusedMarked = true
	for i := range m.params {
		if m.staticUnused[i] {
			m.emit(action{kind: actZero, param: i})
		}
		m.markReady(i)
	}
}

// waited closes a synchronised iteration once its communication is done.
// globalUsed is the used map summed over ranks, or nil when the iteration
// did not allreduce it; origin, whether the ranks agreed that some bucket
// held a NaN before its collective. The write back follows, still busy,
// until done.
func (m *machine) waited(globalUsed []int32, origin bool) error {
	if m.phase != phaseBusy || m.busyIn != "Finalize" {
		if m.phase == phaseFailed {
			return m.err // Fail was called meanwhile
		}
		return errors.New("reducer: internal error: waited outside Finalize")
	}
	m.recordUnused(globalUsed)
	m.window = false
	m.num++
	m.first = false
	m.origin = origin
	if m.stage == rebuildRecording {
		m.stage, m.complete = rebuildRecorded, m.completeOrder()
	}
	m.emit(action{kind: actWriteBack, globalUsed: globalUsed})
	return nil
}

// done ends Finalize: after a synchronised iteration, what it reports
// follows, the origin of a NaN first (Note [where the NaN began]), else
// the finiteness of the results (Options.CheckFinite).
func (m *machine) done() error {
	report := m.phase == phaseBusy && m.busyIn == "Finalize" && m.resume == phaseIdle
	if err := m.leaveBusy(); err != nil {
		return err
	}
	switch {
	case !report:
	case m.origin:
		m.origin = false
		m.emit(action{kind: actReportOrigin, iteration: m.num})
	case m.checkFinite:
		m.emit(action{kind: actCheckFinite, iteration: m.num, usedByNone: m.globalUnused})
	}
	return nil
}

// recordUnused keeps which parameters no rank used. With no map (every
// parameter used, or StaticGraph after its first iteration) the set is
// empty, or StaticGraph's first still holds.
func (m *machine) recordUnused(globalUsed []int32) {
	if globalUsed == nil {
		if !m.static {
			m.globalUnused = nil
		}
		return
	}
	m.globalUnused = nil // replaced, never written in place: status hands it out
	for i, n := range globalUsed {
		if n == 0 {
			if m.globalUnused == nil {
				m.globalUnused = make([]bool, len(m.params))
			}
			m.globalUnused[i] = true
		}
	}
}

func (m *machine) checkUnused(unused []int) error {
	if len(unused) > 0 && !m.findUnused && !m.static {
		return fmt.Errorf("reducer: %d unused parameters (%s) were given but FindUnusedParameters is off; "+
			"turn it on, or make every parameter take part in the loss", len(unused), names(m.params, unused))
	}
	for _, i := range unused {
		if i < 0 || i >= len(m.params) {
			return fmt.Errorf("reducer: unused parameter index %d is out of range [0, %d)", i, len(m.params))
		}
	}
	return nil
}

func (m *machine) nameOf(i int) string {
	if i < 0 || i >= len(m.params) {
		return fmt.Sprintf("no such parameter; the model has %d", len(m.params))
	}
	return m.params[i].Name
}
