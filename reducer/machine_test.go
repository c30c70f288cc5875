package reducer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/pg"
)

// The machine is tested as what it is: events in, actions out, no
// process group, no buffers (Note [events in, actions out]). Its
// scenarios are the files in testdata/ (machine_script_test.go reads
// them); the random walk below checks invariants over any order of events.

func testMachine(n int, o Options, plan [][]int, devices bool) *machine {
	params := make([]Param, n)
	dtypes := make([]pg.Dtype, n)
	for i := range params {
		params[i] = Param{Name: fmt.Sprintf("p%d", i), Dtype: pg.Float32}
		dtypes[i] = pg.Float32
	}
	return newMachine(params, dtypes, 0, o, plan, make([]int32, n), devices)
}

// hostGrad is a gradient the test machine accepts for any parameter.
func hostGrad() pg.Tensor { return pg.NewTensor(pg.Float32, 1) }

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
		m := testMachine(n, o, plan, rng.IntN(2) == 0)
		walk(t, rng, m, plan, trial)
	}
}

func walk(t *testing.T, rng *rand.Rand, m *machine, plan [][]int, trial int) {
	t.Helper()
	var stored []bool
	launched := -1
	for range 60 {
		st := m.status()
		switch st.phase {
		case phaseFailed:
			return
		case phaseIdle:
			var unused []int
			if m.findUnused && rng.IntN(2) == 0 {
				unused = []int{rng.IntN(st.params)}
			}
			// Inside a window, the slots hold what earlier iterations put there.
			if _, err := m.step(evBegin{sync: rng.IntN(4) > 0, unused: unused}, nil); err == nil {
				if _, err := m.step(evBegan{}, nil); err != nil {
					t.Fatalf("trial %d: began: %v", trial, err)
				}
				if !st.window {
					stored = make([]bool, st.params)
				}
				launched = -1
			}
		case phaseLocal, phaseCounting, phaseSyncing:
			if rng.IntN(st.params+1) == 0 {
				as, err := m.step(evFinish{}, nil)
				if err != nil {
					continue
				}
				check(t, trial, plan, as, stored, &launched)
				if m.status().phase == phaseBusy {
					if launched != len(plan)-1 {
						t.Fatalf("trial %d: Finalize waits with %d of %d buckets launched", trial, launched+1, len(plan))
					}
					mustStep(t, m, evWaited{})
					mustStep(t, m, evDone{})
				}
				continue
			}
			i := rng.IntN(st.params)
			as, err := m.step(evReady{param: i, grad: hostGrad()}, nil)
			if err != nil {
				if len(as) > 0 {
					t.Fatalf("trial %d: a refused ready emitted %v", trial, as)
				}
				if m.status().phase != phaseFailed {
					t.Fatalf("trial %d: ready(%d) in phase %v refused without failing: %v", trial, i, st.phase, err)
				}
				continue
			}
			check(t, trial, plan, as, stored, &launched)
		}
	}
}

func mustStep(t *testing.T, m *machine, ev event) []action {
	t.Helper()
	as, err := m.step(ev, nil)
	if err != nil {
		t.Fatalf("%T: %v", ev, err)
	}
	return as
}

// check follows one event's actions: stores mark parameters, launches
// must come in order and find their bucket stored.
func check(t *testing.T, trial int, plan [][]int, as []action, stored []bool, launched *int) {
	t.Helper()
	for _, a := range as {
		switch a.kind {
		case actStore, actZero:
			stored[a.param] = true
		case actLaunch:
			if a.bucket != *launched+1 {
				t.Fatalf("trial %d: launch %d after %d", trial, a.bucket, *launched)
			}
			*launched = a.bucket
			for _, p := range plan[a.bucket] {
				if !stored[p] {
					t.Fatalf("trial %d: bucket %d launched before parameter %d was stored or zeroed", trial, a.bucket, p)
				}
			}
		}
	}
}

// step appends to the caller's slice and never touches what was there:
// no buffer of the machine's own is shared with its callers.
func TestMachineStepAppendsToTheCallersSlice(t *testing.T) {
	m := testMachine(2, Options{}, [][]int{{1, 0}}, true)
	mine := []action{{kind: actZero, param: 7}}
	got, err := m.step(evBegin{sync: true}, mine)
	if err != nil || len(got) != 2 || got[0].param != 7 || got[1].kind != actInstallDevice {
		t.Fatalf("begin appended %v, %v", got, err)
	}
	refused, err := m.step(evBegin{sync: true}, mine)
	if err == nil || len(refused) != 1 {
		t.Fatalf("a refused begin returned %v, %v; want the caller's slice unchanged and an error", refused, err)
	}
	if _, err := m.step(evFail{err: errors.New("boom")}, nil); err == nil || err.Error() != "boom" {
		t.Fatalf("fail returned %v, want the fatal error", err)
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
