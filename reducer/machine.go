package reducer

import (
	"errors"
	"fmt"
)

// Note [events in, actions out]
//
// Every decision the reducer makes lives in machine: whether a call is
// allowed now, which bucket launches next, when unused parameters are
// marked, when the buckets are rebuilt, what StaticGraph's first
// iteration does, when an accumulation window opens and closes. machine is
// a plain state machine in the style of etcd's raft: it holds no lock, no
// goroutine, no clock and no process group. The Reducer (the driver) feeds
// it events — begin (Prepare), ready (MarkReady), finish (Finalize), waited
// (the communication is done), fail — under r.mu, and gets back the
// actions to perform: store this gradient, zero that slot, launch bucket
// k, rebuild in this order, wait. The driver performs them with r.mu
// released, so no lock is ever held across a wait, a comm hook, a device
// copy or an observer call (Note [no lock across a wait]).
//
// The iteration is a phase, not a set of flags:
//
//	idle ──begin(sync=false)──▶ busy ──began──▶ local ──finish──▶ idle
//	idle ──begin(sync=true)───▶ busy ──began──▶ syncing   ──finish──▶ busy ──done──▶ idle
//	                                        └─▶ counting  (StaticGraph's first) ┘
//	any ──fail──▶ failed (terminal)
//
// busy covers what Prepare and Finalize do with the lock released: the
// rebuild's broadcast, the device twins' setup, the waits and the write
// back. Only read-only calls and Fail are taken while busy. Two things
// persist across iterations besides the phase: the accumulation window (a
// no-sync iteration opened it; the next synchronised one closes it) and
// the rebuild's stage (waiting → recording → recorded → done).

// phase is where the reducer stands in the iteration cycle.
type phase uint8

const (
	phaseIdle  phase = iota // between iterations
	phaseBusy               // Prepare or Finalize performs its actions without the lock
	phaseLocal              // a no-sync iteration: gradients go into the buckets, nothing launches
	// StaticGraph's first synchronised iteration: everything launches at Finalize (c10d's delay_all_reduce)
	phaseCounting
	phaseSyncing // a synchronised iteration: buckets launch as they fill, in order
	phaseFailed  // a fatal error: every later call returns it
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

// actionKind is what the driver is told to do.
type actionKind uint8

const (
	// replan the buckets in rank 0's ready order (order: this rank's, complete); copy the window's sums over (add)
	actRebuild actionKind = iota + 1
	// install the device twins of the current plan, registered ones when add (no rebuild to come)
	actDevice
	// put parameter index's gradient into its bucket: a copy, or a sum inside a window (add)
	actStore
	actZero   // zero parameter index's slot: a gradient that never came
	actUpload // send parameter index's slot to its device twin
	// run the comm hook on bucket index, first checking it for NaN and infinities when add (Note [where the NaN began])
	actLaunch
	// start the used map's allreduce now (StaticGraph's first iteration; list: its unused set)
	actReduceUsed
	// wait for every bucket in order, then for the used map, allreducing it first when add
	actWait
	actWriteBack // write every result into its gradient, then check finiteness when add
	// after the wait: the ranks agree whether some bucket held a NaN or an infinity before its collective, with an
	// allreduce of their own when add, else on the used map's (Note [where the NaN began])
	actAgreeOrigin
)

// action is one thing to do. The fields beyond kind depend on it.
type action struct {
	kind  actionKind
	index int   // a parameter (store, zero, upload) or a bucket (launch)
	add   bool  // see the kinds
	order []int // rebuild: the gradient-ready order
	list  []int // reduceUsed: the parameters unused in the first iteration
}

// machine is the reducer's decisions: Note [events in, actions out].
type machine struct {
	params      []Param
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

	stage rebuildStage
	order []int // the recorded ready order

	first        bool   // StaticGraph: the first synchronised iteration has not finished
	staticUnused []bool // StaticGraph, after its first iteration: no gradient there on this rank
	staticList   []int
	globalUnused []bool // no rank used it in the last synchronised iteration; nil: all used

	acts []action // the output buffer, reused by every event
}

func newMachine(params []Param, rank int, o Options, plan [][]int) *machine {
	m := &machine{
		params: params, rank: rank,
		findUnused: o.FindUnusedParameters, static: o.StaticGraph, checkFinite: o.CheckFinite,
		findOrigin: o.FindNonFiniteOrigin,
		used:       make([]int32, len(params)), first: o.StaticGraph, stage: rebuildDone,
	}
	if o.rebuilds() {
		m.stage = rebuildWaiting
	}
	m.replan(plan)
	return m
}

// replan follows a new bucket plan (New, or a rebuild).
func (m *machine) replan(plan [][]int) { m.t = newTracker(plan, len(m.params)) }

func (m *machine) emit(a action) { m.acts = append(m.acts, a) }

// usable says why an event that changes the iteration cannot be taken now.
func (m *machine) usable() error {
	switch m.phase {
	case phaseFailed:
		return m.err
	case phaseBusy:
		return fmt.Errorf("reducer: %s is waiting for communication; Prepare, MarkReady and Finalize must not overlap it",
			m.busyIn)
	}
	return nil
}

// fail moves to failed; the first error is the one every later call gets.
func (m *machine) fail(err error) error {
	if m.phase != phaseFailed {
		m.phase, m.err = phaseFailed, err
	}
	return err
}

// failed reports whether err is the machine's fatal error, as opposed to
// a refusal that leaves the reducer usable.
func (m *machine) failed(err error) bool { return err != nil && m.phase == phaseFailed && m.err == err }

// begin is Prepare. Its actions (a rebuild, the device twins) run before
// began opens the iteration.
func (m *machine) begin(sync bool, unused []int) ([]action, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if m.phase == phaseCounting || m.phase == phaseSyncing {
		if missing := m.t.missing(); len(missing) > 0 {
			return nil, m.fail(m.unfinishedError(missing))
		}
		return nil, m.fail(
			fmt.Errorf("%w: Finalize was not called after the previous backward; call it after every backward pass",
				ErrUnfinishedReduction))
	}
	if err := m.checkUnused(unused); err != nil {
		return nil, err
	}
	m.acts = m.acts[:0]
	next := phaseLocal
	if sync {
		next = phaseSyncing
		if m.first {
			next = phaseCounting
		}
		m.planRebuild()
		m.emit(action{kind: actDevice, add: m.stage == rebuildDone})
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
	return m.acts, nil
}

// planRebuild, at the start of a synchronised iteration, rebuilds when an
// order was recorded, or starts recording one. StaticGraph's first
// iteration records nothing: its gradients only count.
func (m *machine) planRebuild() {
	switch {
	case m.stage == rebuildRecorded:
		m.emit(action{kind: actRebuild, order: m.completeOrder(), add: m.window})
		m.stage = rebuildDone // m.order stays, for readyOrder
	case m.stage == rebuildWaiting && !m.first:
		m.stage, m.order = rebuildRecording, m.order[:0]
	}
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

// readyOrder is the complete recorded order, once there is one.
func (m *machine) readyOrder() []int {
	if m.stage != rebuildRecorded && (m.stage != rebuildDone || m.order == nil) {
		return nil
	}
	return m.completeOrder()
}

// began opens the iteration once Prepare's actions are done.
func (m *machine) began() {
	if m.phase == phaseBusy {
		m.phase = m.resume
	}
}

// done ends Finalize's busy phase.
func (m *machine) done() { m.began() }

// syncing reports whether the iteration in progress is synchronised.
func (m *machine) syncing() bool { return m.phase == phaseSyncing || m.phase == phaseCounting }

// accepts says whether a gradient for parameter i can be taken now; the
// driver then checks the gradient itself and calls ready.
func (m *machine) accepts(i int) error {
	if err := m.usable(); err != nil {
		return err
	}
	if m.phase == phaseIdle {
		return fmt.Errorf("reducer: gradient for parameter %d (%s) arrived outside an iteration; call Prepare before "+
			"backward", i, m.nameOf(i))
	}
	if i < 0 || i >= len(m.params) {
		return fmt.Errorf("%w: parameter index %d is out of range [0, %d)", ErrBadGradient, i, len(m.params))
	}
	return nil
}

// ready is MarkReady of parameter i, after accepts.
func (m *machine) ready(i int) ([]action, error) {
	if m.syncing() && m.staticUnused != nil && m.staticUnused[i] {
		return nil, m.fail(fmt.Errorf("%w, e.g., one parameter is unused in the first iteration but then got used in the "+
			"second (parameter %d, %s). This is not compatible with StaticGraph", ErrGraphChanged, i, m.params[i].Name))
	}
	if m.t.isReady(i) {
		return nil, m.fail(m.markedTwiceError(i))
	}
	m.acts = m.acts[:0]
	m.used[i] = 1
	m.emit(action{kind: actStore, index: i, add: m.window})
	if m.phase != phaseSyncing {
		m.t.markOnly(i) // no communication now: see finish
		return m.acts, nil
	}
	m.markUnused()
	if m.stage == rebuildRecording {
		m.order = append(m.order, i)
	}
	m.emit(action{kind: actUpload, index: i})
	m.markReady(i)
	return m.acts, nil
}

// markReady marks parameter i ready and launches what that completes.
func (m *machine) markReady(i int) {
	from, to, _ := m.t.markReady(i)
	for b := from; b < to; b++ {
		m.emit(action{kind: actLaunch, index: b, add: m.findOrigin})
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
			m.emit(action{kind: actZero, index: i})
		}
		m.markReady(i)
	}
}

// finish is Finalize. A no-sync iteration ends at once; a synchronised
// one launches what is left and goes busy until waited.
func (m *machine) finish() ([]action, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	m.acts = m.acts[:0]
	switch m.phase {
	case phaseIdle:
		return nil, errors.New(
			"reducer: Finalize without Prepare; call Prepare before each backward pass and Finalize after it")
	case phaseLocal:
		m.endLocal()
		return m.acts, nil
	case phaseCounting:
		m.launchFirst()
	}
	m.markUnused()
	if !m.t.allLaunched() {
		return nil, m.fail(m.unfinishedError(m.t.missing()))
	}
	reduceUsed := m.findUnused && !m.static
	m.emit(action{kind: actWait, add: reduceUsed}) // Note [used map after the buckets]
	if m.findOrigin {
		m.emit(action{kind: actAgreeOrigin, add: !reduceUsed}) // after the wait: Note [where the NaN began]
	}
	m.phase, m.resume, m.busyIn = phaseBusy, phaseIdle, "Finalize"
	return m.acts, nil
}

// endLocal closes a no-sync iteration. The first iteration of a window
// copied gradients into the buckets; the slots it did not reach are
// zeroed so that later iterations can add to them.
func (m *machine) endLocal() {
	if !m.window {
		for i := range m.params {
			if !m.t.isReady(i) {
				m.emit(action{kind: actZero, index: i})
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
	m.emit(action{kind: actReduceUsed, list: m.staticList})
	m.t.reset()
	m.unusedMarked = true
	for i := range m.params {
		if m.staticUnused[i] {
			m.emit(action{kind: actZero, index: i})
		}
		m.markReady(i)
	}
}

// waited closes a synchronised iteration once its communication is done.
// globalUsed is the used map summed over ranks, or nil when the iteration
// did not allreduce it. The write back follows, still busy, until done.
func (m *machine) waited(globalUsed []int32) []action {
	m.recordUnused(globalUsed)
	m.window = false
	m.num++
	m.first = false
	if m.stage == rebuildRecording {
		m.stage = rebuildRecorded
	}
	m.acts = append(m.acts[:0], action{kind: actWriteBack, add: m.checkFinite})
	return m.acts
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
	m.globalUnused = nil
	for i, n := range globalUsed {
		if n == 0 {
			if m.globalUnused == nil {
				m.globalUnused = make([]bool, len(m.params))
			}
			m.globalUnused[i] = true
		}
	}
}

// usedByNone reports whether no rank used parameter i in the last
// synchronised iteration.
func (m *machine) usedByNone(i int) bool { return m.globalUnused != nil && m.globalUnused[i] }

func (m *machine) checkUnused(unused []int) error {
	if len(unused) > 0 && !m.findUnused && !m.static {
		return fmt.Errorf("reducer: %d unused parameters (%s) were given but FindUnusedParameters is off; turn it on, or "+
			"make every parameter take part in the loss", len(unused), names(m.params, unused))
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
