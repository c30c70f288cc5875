package reducer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The machine is tested as what it is: events in, actions out, no
// process group, no buffers (Note [events in, actions out]).

func (a action) String() string {
	plus := map[bool]string{true: "+"}[a.add]
	switch a.kind {
	case actRebuild:
		return fmt.Sprintf("rebuild%s %v", plus, a.order)
	case actDevice:
		return "device" + plus
	case actStore:
		return fmt.Sprintf("store%s %d", plus, a.index)
	case actZero:
		return fmt.Sprintf("zero %d", a.index)
	case actUpload:
		return fmt.Sprintf("upload %d", a.index)
	case actLaunch:
		return fmt.Sprintf("launch%s %d", plus, a.index)
	case actAgreeOrigin:
		return "agreeOrigin" + plus
	case actReduceUsed:
		return fmt.Sprintf("reduceUsed %v", a.list)
	case actWait:
		return "wait" + plus
	case actWriteBack:
		return "writeBack" + plus
	}
	return fmt.Sprintf("action(%d)", a.kind)
}

func acts(as []action, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func testMachine(n int, o Options, plan [][]int) *machine {
	params := make([]Param, n)
	for i := range params {
		params[i] = Param{Name: fmt.Sprintf("p%d", i)}
	}
	return newMachine(params, 0, o, plan)
}

// step checks one event's actions.
func step(t *testing.T, what string, got string, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// Two synchronised iterations of a four-parameter model in two buckets:
// the first launches as buckets fill and records the ready order, the
// second's Prepare rebuilds in that order and installs registered twins.
func TestMachineRecordsThenRebuilds(t *testing.T) {
	m := testMachine(4, Options{}, [][]int{{2, 3}, {0, 1}})
	step(t, "begin", acts(m.begin(true, nil)), "device")
	if m.phase != phaseBusy {
		t.Fatalf("phase %v during Prepare's actions, want busy", m.phase)
	}
	m.began()
	step(t, "ready 3", acts(m.ready(3)), "store 3, upload 3")
	step(t, "ready 0", acts(m.ready(0)), "store 0, upload 0")
	step(t, "ready 2", acts(m.ready(2)), "store 2, upload 2, launch 0")
	step(t, "ready 1", acts(m.ready(1)), "store 1, upload 1, launch 1")
	step(t, "finish", acts(m.finish()), "wait")
	step(t, "waited", acts(m.waited(nil), nil), "writeBack")
	m.done()
	if m.phase != phaseIdle || m.num != 1 || m.stage != rebuildRecorded {
		t.Fatalf("after the first iteration: phase %v, num %d, stage %d", m.phase, m.num, m.stage)
	}
	step(t, "begin 2", acts(m.begin(true, nil)), "rebuild [3 0 2 1], device+")
	m.began()
	if got := m.readyOrder(); !slices.Equal(got, []int{3, 0, 2, 1}) {
		t.Errorf("readyOrder after the rebuild %v", got)
	}
}

// With FindUnusedParameters, the unused parameters are zeroed and marked
// ready at the first gradient, as c10d does in its first autograd hook;
// the used map is allreduced after the buckets.
func TestMachineMarksUnusedAtTheFirstGradient(t *testing.T) {
	m := testMachine(3, Options{FindUnusedParameters: true}, [][]int{{2}, {1}, {0}})
	step(t, "begin", acts(m.begin(true, []int{1})), "device+") // FindUnusedParameters never rebuilds
	m.began()
	step(t, "ready 2", acts(m.ready(2)), "store 2, zero 1, upload 2, launch 0, launch 1")
	step(t, "ready 0", acts(m.ready(0)), "store 0, upload 0, launch 2")
	step(t, "finish", acts(m.finish()), "wait+")
	m.waited([]int32{2, 0, 1})
	m.done()
	if !m.usedByNone(1) || m.usedByNone(0) {
		t.Errorf("globally unused %v, want only parameter 1", m.globalUnused)
	}
	// An unused parameter that produces a gradient after all is marked twice.
	m.begin(true, []int{1})
	m.began()
	m.ready(0)
	_, err := m.ready(1)
	if !errors.Is(err, ErrMarkedTwice) || m.phase != phaseFailed {
		t.Fatalf("ready of a parameter given as unused: %v, phase %v", err, m.phase)
	}
}

// StaticGraph's first iteration only counts; Finalize allreduces the used
// map first, then zeroes the unused and launches everything. A parameter
// of that unused set that gets a gradient later fails the run.
func TestMachineStaticGraphFirstIteration(t *testing.T) {
	m := testMachine(3, Options{StaticGraph: true}, [][]int{{2}, {1, 0}})
	step(t, "begin", acts(m.begin(true, nil)), "device")
	m.began()
	if m.phase != phaseCounting {
		t.Fatalf("phase %v, want counting", m.phase)
	}
	step(t, "ready 2", acts(m.ready(2)), "store 2")
	step(t, "ready 0", acts(m.ready(0)), "store 0")
	step(t, "finish", acts(m.finish()), "reduceUsed [1], zero 1, launch 0, launch 1, wait")
	m.waited([]int32{2, 0, 2})
	m.done()
	step(t, "begin 2", acts(m.begin(true, nil)), "device") // records this iteration; rebuilds at the third
	m.began()
	step(t, "ready 2 (the static unused set is marked with it)", acts(m.ready(2)), "store 2, zero 1, upload 2, launch 0")
	if _, err := m.ready(1); !errors.Is(err, ErrGraphChanged) {
		t.Fatalf("a gradient for a StaticGraph-unused parameter: %v, want ErrGraphChanged", err)
	}
}

// No-sync iterations open a window: the first zeroes what it did not
// reach, later ones add; the synchronised iteration closes it.
func TestMachineAccumulationWindow(t *testing.T) {
	m := testMachine(3, Options{}, [][]int{{2, 1, 0}})
	step(t, "begin local", acts(m.begin(false, nil)), "")
	m.began()
	step(t, "ready 0", acts(m.ready(0)), "store 0")
	step(t, "finish local", acts(m.finish()), "zero 1, zero 2")
	step(t, "begin local 2", acts(m.begin(false, nil)), "")
	m.began()
	step(t, "ready 1", acts(m.ready(1)), "store+ 1")
	step(t, "finish local 2", acts(m.finish()), "")
	m.begin(true, nil)
	m.began()
	for _, i := range []int{2, 0} {
		step(t, "ready", acts(m.ready(i)), fmt.Sprintf("store+ %d, upload %d", i, i))
	}
	step(t, "ready 1", acts(m.ready(1)), "store+ 1, upload 1, launch 0")
	m.finish()
	m.waited(nil)
	m.done()
	if m.window {
		t.Fatal("the synchronised iteration left the window open")
	}
	step(t, "begin after the window", acts(m.begin(true, nil)), "rebuild [2 0 1], device+")
}

// While Prepare's or Finalize's actions run, only Fail is taken; every
// other event is refused without changing anything, and a failure is
// returned by every later event.
func TestMachineBusyRefusesAndFailureSticks(t *testing.T) {
	m := testMachine(2, Options{}, [][]int{{1, 0}})
	m.begin(true, nil)
	m.began()
	m.ready(1)
	m.ready(0)
	m.finish()
	for name, ev := range map[string]func() error{
		"begin":  func() error { _, err := m.begin(true, nil); return err },
		"accept": func() error { return m.accepts(0) },
		"finish": func() error { _, err := m.finish(); return err },
	} {
		if err := ev(); err == nil || !strings.Contains(err.Error(), "Finalize is waiting") || m.phase != phaseBusy {
			t.Errorf("%s while busy: %v, phase %v", name, err, m.phase)
		}
	}
	boom := errors.New("boom")
	if err := m.fail(boom); err != boom || !m.failed(boom) {
		t.Fatalf("fail: %v", err)
	}
	m.fail(errors.New("a later error"))
	for _, err := range []error{m.accepts(0), m.usable(), func() error { _, err := m.begin(true, nil); return err }()} {
		if err != boom {
			t.Errorf("after the failure: %v, want the first error", err)
		}
	}
}

// A Prepare before the previous synchronised iteration's Finalize fails
// the run, naming the parameters that got no gradient.
func TestMachineUnfinishedIteration(t *testing.T) {
	m := testMachine(3, Options{}, [][]int{{2}, {1}, {0}})
	m.begin(true, nil)
	m.began()
	m.ready(2)
	_, err := m.begin(true, nil)
	if !errors.Is(err, ErrUnfinishedReduction) || !strings.Contains(err.Error(), "[0 1]") ||
		!strings.Contains(err.Error(), "p0, p1") {
		t.Fatalf("begin over an unfinished iteration: %v", err)
	}
	if m.phase != phaseFailed {
		t.Fatalf("phase %v, want failed", m.phase)
	}
}

// A random walk of events over random plans and options: whatever the
// order of events, every synchronised iteration that finishes launched
// each bucket exactly once, in index order, each after all its
// parameters were stored; refused events emit nothing; busy ends only by
// began, done or fail.
func TestMachineRandomWalkKeepsLaunchOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	for trial := range 300 {
		n := 1 + rng.IntN(6)
		plan := randomPlan(rng, n)
		o := Options{FindUnusedParameters: rng.IntN(2) == 0, StaticGraph: rng.IntN(3) == 0}
		m := testMachine(n, o, plan)
		walk(t, rng, m, plan, trial)
	}
}

func walk(t *testing.T, rng *rand.Rand, m *machine, plan [][]int, trial int) {
	t.Helper()
	var stored []bool
	launched := -1
	for range 60 {
		if m.phase == phaseFailed {
			return
		}
		switch m.phase {
		case phaseIdle:
			var unused []int
			if m.findUnused && rng.IntN(2) == 0 {
				unused = []int{rng.IntN(len(m.params))}
			}
			window := m.window // inside a window, the slots hold what earlier iterations put there
			if _, err := m.begin(rng.IntN(4) > 0, unused); err == nil {
				m.began()
				if !window {
					stored = make([]bool, len(m.params))
				}
				launched = -1
			}
		case phaseLocal, phaseCounting, phaseSyncing:
			if rng.IntN(len(m.params)+1) == 0 {
				as, err := m.finish()
				if err != nil {
					continue
				}
				check(t, trial, plan, as, stored, &launched)
				if m.phase == phaseBusy {
					if launched != len(plan)-1 {
						t.Fatalf("trial %d: Finalize waits with %d of %d buckets launched", trial, launched+1, len(plan))
					}
					m.waited(nil)
					m.done()
				}
				continue
			}
			i := rng.IntN(len(m.params))
			if err := m.accepts(i); err != nil {
				t.Fatalf("trial %d: accepts(%d) in phase %v: %v", trial, i, m.phase, err)
			}
			as, err := m.ready(i)
			if err != nil {
				if len(as) > 0 {
					t.Fatalf("trial %d: a refused ready emitted %v", trial, as)
				}
				continue
			}
			check(t, trial, plan, as, stored, &launched)
		}
	}
}

// check follows one event's actions: stores mark parameters, launches
// must come in order and find their bucket stored.
func check(t *testing.T, trial int, plan [][]int, as []action, stored []bool, launched *int) {
	t.Helper()
	for _, a := range as {
		switch a.kind {
		case actStore, actZero:
			stored[a.index] = true
		case actLaunch:
			if a.index != *launched+1 {
				t.Fatalf("trial %d: launch %d after %d", trial, a.index, *launched)
			}
			*launched = a.index
			for _, p := range plan[a.index] {
				if !stored[p] {
					t.Fatalf("trial %d: bucket %d launched before parameter %d was stored or zeroed", trial, a.index, p)
				}
			}
		}
	}
}

// Progress reads the machine: phase, marks and launches of the iteration.
func TestProgress(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2)
	gs := world(t, 1)
	r, err := New(ctx, gs[0], params, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := r.Progress(); p.Phase != "idle" || p.Params != 2 || p.Buckets != 1 {
		t.Fatalf("before training: %+v", p)
	}
	if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
		t.Fatal(err)
	}
	grads := sameValues(params)
	if err := r.MarkReady(1, grads[1]); err != nil {
		t.Fatal(err)
	}
	if p := r.Progress(); p.Phase != "syncing" || p.Ready != 1 || p.Launched != 0 {
		t.Fatalf("mid-backward: %+v", p)
	}
	if err := r.MarkReady(0, grads[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if p := r.Progress(); p.Phase != "idle" || p.Iterations != 1 {
		t.Fatalf("after: %+v", p)
	}
	r.Fail(errors.New("boom"))
	if p := r.Progress(); p.Phase != "failed" || p.Err != "boom" {
		t.Fatalf("failed: %+v", p)
	}
}
