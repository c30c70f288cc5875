package ft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// The fault-injection harness: replicas as goroutines, each with its own
// Manager, store, recovery server and pg/tcp groups over real loopback
// sockets, training a linear model with SGD and momentum on a
// deterministic stream of samples, with torchft's events injected
// (manager_integ_test.py: fail_at(rank, step), failing allreduces, late
// joiners) and more. After every scenario the live replicas' states must
// be bitwise equal, and equal to a one-process replay of the committed
// steps' recorded participant sets.

const (
	toyDim      = 12
	toyBatch    = 4
	toyLR       = 0.05
	toyMomentum = 0.9
)

// toyState is a replica's whole training state.
type toyState struct {
	w, mom []float64
	cursor int64 // samples consumed by committed steps
	step   int64
}

func newToyState(seed string) *toyState {
	s := &toyState{w: make([]float64, toyDim), mom: make([]float64, toyDim)}
	h := uint64(14695981039346656037)
	for _, c := range []byte(seed) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for i := range s.w {
		s.w[i] = unit(h+uint64(i)) - 0.5
	}
	return s
}

func (s *toyState) Snapshot() ([]byte, error) {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.step))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.cursor))
	for _, v := range append(slices.Clone(s.w), s.mom...) {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b, nil
}

func (s *toyState) Restore(step int64, b []byte) error {
	if len(b) != 8*(2+2*toyDim) {
		return fmt.Errorf("a toy state is %d bytes, not %d", len(b), 8*(2+2*toyDim))
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if int64(u(0)) != step {
		return fmt.Errorf("the snapshot is of step %d, not %d", u(0), step)
	}
	s.step, s.cursor = int64(u(0)), int64(u(1))
	for i := range toyDim {
		s.w[i], s.mom[i] = math.Float64frombits(u(2+i)), math.Float64frombits(u(2+toyDim+i))
	}
	return nil
}

// padded is a toyState whose snapshots carry pad bytes more, in 1 KiB
// chunks: a transfer long enough to kill its source during it.
type padded struct {
	*toyState
	pad int
}

func (p *padded) Snapshot() ([]byte, error) {
	b, _ := p.toyState.Snapshot()
	return append(b, make([]byte, p.pad)...), nil
}

func (p *padded) Restore(step int64, b []byte) error {
	if len(b) < p.pad {
		return fmt.Errorf("a padded snapshot of %d bytes", len(b))
	}
	return p.toyState.Restore(step, b[:len(b)-p.pad])
}

// unit is splitmix64 of x in [0, 1).
func unit(x uint64) float64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return float64((x^x>>31)>>11) / (1 << 53)
}

// sample i of the stream: x and y = 3·x₀ − 2·x₁ + noise.
func sample(i int64) ([]float64, float64) {
	x := make([]float64, toyDim)
	for j := range x {
		x[j] = unit(uint64(i)*64+uint64(j)) - 0.5
	}
	return x, 3*x[0] - 2*x[1] + 0.1*(unit(uint64(i)*64+63)-0.5)
}

// toyGrad is the mean squared error's gradient over samples [from, from+n).
func toyGrad(w []float64, from int64) []float64 {
	g := make([]float64, toyDim)
	for i := from; i < from+toyBatch; i++ {
		x, y := sample(i)
		e := -y
		for j := range x {
			e += w[j] * x[j]
		}
		for j := range x {
			g[j] += e * x[j] / toyBatch
		}
	}
	return g
}

func (s *toyState) update(g []float64, participants int) {
	for j := range s.w {
		s.mom[j] = toyMomentum*s.mom[j] + g[j]
		s.w[j] -= toyLR * s.mom[j]
	}
	s.cursor += int64(participants * toyBatch)
}

// record is one committed step, as a replica saw it.
type record struct {
	Step          int64
	Participants  []string
	Cursor        int64  // the first sample of the step
	Chain, Parent string // Outcome's
}

// event is something injected into one replica at one step.
type event int

const (
	evDie        event = iota + 1 // the replica's process ends: its Manager closes
	evFailStep                    // its allreduce fails (Manager.Fail)
	evStall                       // it stops for 2 group timeouts, heartbeats on, then goes on
	evDieServing                  // it dies right after serving a snapshot, mid-transfer
)

// plan is a scenario.
type plan struct {
	replicas    []string
	minReplicas int
	steps       int64
	pad         int                            // bytes of padding in each snapshot, for a longer transfer
	ordered     bool                           // ManagerOptions.OrderedSum
	events      map[string]map[int64]event     // replica → step → event (at its first Start at that step)
	starts      map[string]time.Duration       // a late start, from the beginning
	startAfter  map[string]int64               // a late start, once some replica has committed this many steps
	voteAlone   map[string]int64               // the replica's vote at this step completes alone (aloneGroup)
	hold        map[string]int64               // before its Start at this step the replica waits for that vote
	restarts    map[string]time.Duration       // a dead replica started again, fresh, this long after its death
	check       func(t *testing.T, h *harness) // more checks
}

type harness struct {
	t   *testing.T
	p   plan
	lh  *Server
	mu  sync.Mutex
	rs  map[string]*toyReplica // the last incarnation of each
	all []*toyReplica
	wg  sync.WaitGroup
	// finish is called when a replica has committed the plan's steps: the
	// others get a second to finish too, then their context ends.
	finish      func()
	diedServing bool         // an evDieServing has fired
	progress    atomic.Int64 // the most steps any replica has committed
	aloneDone   atomic.Bool  // the voteAlone replica has committed its step
}

type toyReplica struct {
	id       string
	st       *toyState
	padded   *padded // st as the Manager sees it
	mgr      *Manager
	records  []record
	stats    ManagerStats
	died     bool
	done     bool // it committed the plan's steps
	err      error
	fired    map[int64]bool
	discards []error // why each discarded step was
	atStep   int64   // the step in progress
}

// event is what the plan injects into r at the step info begins, once:
// evDieServing at the first step from its key on at which r serves a
// healing peer, and only for the first replica that does.
func (h *harness) event(r *toyReplica, info StepInfo) event {
	for step, ev := range h.p.events[r.id] {
		if r.fired[step] {
			continue
		}
		if ev == evDieServing && info.Step >= step && info.Serving > 0 {
			h.mu.Lock()
			first := !h.diedServing
			h.diedServing = true
			h.mu.Unlock()
			if first {
				r.fired[step] = true
				return ev
			}
		}
		if ev != evDieServing && step == info.Step {
			r.fired[step] = true
			return ev
		}
	}
	return 0
}

func runPlan(t *testing.T, p plan) *harness {
	t.Helper()
	o := fastOptions(p.minReplicas)
	o.JoinTimeout, o.HeartbeatTimeout = 200*time.Millisecond, time.Second
	h := &harness{t: t, p: p, lh: startServer(t, "127.0.0.1:0", o), rs: map[string]*toyReplica{}}
	defer h.lh.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h.finish = func() { time.AfterFunc(time.Second, cancel) } // stragglers (see live)
	for _, id := range p.replicas {
		h.launch(ctx, id, p.starts[id], p.startAfter[id])
	}
	h.wg.Wait()
	for _, r := range h.all {
		if r.err != nil {
			t.Errorf("replica %s: %v", r.id, r.err)
		}
	}
	h.checkEqual()
	if p.check != nil {
		p.check(t, h)
	}
	return h
}

func (h *harness) launch(ctx context.Context, id string, after time.Duration, atStep int64) {
	h.wg.Go(func() {
		select {
		case <-time.After(after):
		case <-ctx.Done():
			return
		}
		for h.progress.Load() < atStep {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
		r := &toyReplica{id: id, st: newToyState(id), fired: map[int64]bool{}}
		r.padded = &padded{toyState: r.st, pad: h.p.pad}
		h.mu.Lock()
		h.rs[id] = r
		h.all = append(h.all, r)
		h.mu.Unlock()
		r.err = h.train(ctx, r)
		if r.err != nil && ctx.Err() != nil && !r.done {
			r.err = nil // a straggler stopped at the end (see live)
		}
		if r.died && ctx.Err() == nil {
			if d, ok := h.p.restarts[id]; ok {
				h.launch(ctx, id, d, 0)
			}
		}
	})
}

var errInjected = errors.New("an injected allreduce failure")

// train is one replica's loop, until the plan's steps are committed.
func (h *harness) train(ctx context.Context, r *toyReplica) error {
	c := newClient(h.t, h.lh.Addr(), r.id, testSecret)
	m, err := NewManager(ctx, ManagerOptions{ReplicaID: r.id, Lighthouse: c, Secret: testSecret,
		ListenAddr: "127.0.0.1:0", State: r.padded, OrderedSum: h.p.ordered, Timeout: 20 * time.Second,
		HeartbeatInterval: 50 * time.Millisecond, ChunkBytes: 1 << 10,
		Connect: h.connector(r)})
	if err != nil {
		return err
	}
	r.mgr = m
	defer func() { r.stats = m.Stats() }()
	for m.Step() < h.p.steps {
		if at, ok := h.p.hold[r.id]; ok && at == m.Step() {
			h.waitAlone(ctx)
		}
		info, err := m.Start(ctx)
		if err != nil {
			m.Close()
			return err
		}
		ev := h.event(r, info)
		switch ev {
		case evDie:
			r.died = true
			return m.Close()
		case evDieServing:
			r.died = true
			time.Sleep(5 * time.Millisecond) // the healer has begun fetching the chunks
			return m.Close()
		case evStall:
			time.Sleep(time.Second) // two group timeouts
		}
		g := make([]float64, toyDim)
		if !info.Healing {
			g = toyGrad(r.st.w, r.st.cursor+int64(info.Rank*toyBatch))
		}
		time.Sleep(10 * time.Millisecond) // forward and backward
		if ev == evFailStep {
			m.Fail(errInjected)
		}
		_ = m.AllReduce(ctx, pg.Float64s(g))
		r.atStep = info.Step
		out, err := m.Commit(ctx)
		if err != nil {
			m.Close()
			return err
		}
		if !out.Committed {
			r.discards = append(r.discards, out.Err)
		}
		if out.Committed {
			cursor := r.st.cursor
			r.st.update(g, len(info.Participants))
			r.st.step = out.Step
			for old := h.progress.Load(); out.Step > old && !h.progress.CompareAndSwap(old, out.Step); {
				old = h.progress.Load()
			}
			r.records = append(r.records, record{Step: info.Step, Participants: info.Participants, Cursor: cursor,
				Chain: out.Chain, Parent: out.Parent})
			if at, ok := h.p.voteAlone[r.id]; ok && at == info.Step {
				h.aloneDone.Store(true)
			}
		}
	}
	r.stats, r.done = m.Stats(), true
	h.finish()
	return m.Close()
}

// live are the replicas that committed the plan's steps. One that did not
// a second after the first one did is a straggler: it had left the
// quorum (stalled, or started late) and the others finished without it,
// so nobody is left to heal it; it is stopped and not compared.
func (h *harness) live() []*toyReplica {
	var out []*toyReplica
	for _, r := range h.rs {
		if r.done {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *toyReplica) int { return compareStrings(a.id, b.id) })
	return out
}

func compareStrings(a, b string) int {
	if a < b {
		return -1
	} else if a > b {
		return 1
	}
	return 0
}

// checkEqual: the live replicas are bitwise one state, at the plan's step,
// and the replay of the merged records is that state too.
func (h *harness) checkEqual() {
	t := h.t
	live := h.live()
	if len(live) == 0 {
		t.Fatal("no replica finished")
	}
	want, _ := live[0].st.Snapshot()
	for _, r := range live {
		if got, _ := r.st.Snapshot(); !slices.Equal(got, want) {
			t.Errorf("replica %s's state differs from %s's (step %d vs %d)", r.id, live[0].id, r.st.step, live[0].st.step)
		}
	}
	if live[0].st.step != h.p.steps {
		t.Errorf("the live replicas are at step %d, want %d", live[0].st.step, h.p.steps)
	}
	recs := h.merged()
	rp := replay(t, recs, h.p.ordered)
	got, _ := rp.Snapshot()
	if !h.p.ordered {
		for j := range rp.w {
			if d := math.Abs(rp.w[j] - live[0].st.w[j]); d > 1e-12 {
				t.Errorf("w[%d]: replay %v, replicas %v", j, rp.w[j], live[0].st.w[j])
			}
		}
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("the replay of %d committed steps is not bitwise the replicas' state: w %v vs %v", len(recs), rp.w,
			live[0].st.w)
	}
}

// merged is every committed step once, following the commit chain back
// from the first live replica's (Note [the commit chain]); replicas that
// recorded the same commit must agree on it.
func (h *harness) merged() []record {
	t := h.t
	by := map[string]record{}
	for _, r := range h.all {
		for _, rec := range r.records {
			if old, ok := by[rec.Chain]; ok && (old.Step != rec.Step || !slices.Equal(old.Participants,
				rec.Participants) || old.Cursor != rec.Cursor) {
				t.Errorf("commit %s: replica %s recorded step %d %v at %d, another step %d %v at %d", rec.Chain, r.id,
					rec.Step, rec.Participants, rec.Cursor, old.Step, old.Participants, old.Cursor)
			}
			by[rec.Chain] = rec
		}
	}
	var out []record
	for c := h.live()[0].mgr.CommitChain(); c != ""; c = by[c].Parent {
		rec, ok := by[c]
		if !ok {
			t.Fatalf("no replica recorded the commit %s, %d before the end", c, len(out))
		}
		out = append(out, rec)
	}
	slices.Reverse(out)
	for i, rec := range out {
		if rec.Step != int64(i) {
			t.Fatalf("the chain's commit %d is of step %d", i, rec.Step)
		}
	}
	return out
}

// connector is r's Connector: TCP, and an aloneGroup where the plan has r
// vote alone.
func (h *harness) connector(r *toyReplica) Connector {
	base := TCPConnector(TCPOptions{Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: 500 * time.Millisecond})
	at, ok := h.p.voteAlone[r.id]
	if !ok {
		return base
	}
	return func(ctx context.Context, c GroupConfig) (pg.ProcessGroup, error) {
		g, err := base(ctx, c)
		if err != nil {
			return nil, err
		}
		return &aloneGroup{ProcessGroup: g, h: h, r: r, step: at}, nil
	}
}

// aloneGroup's commit vote at step completes on its replica alone: it
// waits until the others have given up on it and redone the step, then
// reports a unanimous 1, as a replica frozen in the vote (SIGSTOP) finds
// the others' votes waiting in its socket when it thaws.
type aloneGroup struct {
	pg.ProcessGroup
	h    *harness
	r    *toyReplica
	step int64
}

func (g *aloneGroup) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if op.Kind != pg.Min || g.r.atStep != g.step || g.h.aloneDone.Load() {
		return g.ProcessGroup.AllReduce(ctx, t, op)
	}
	for g.h.progress.Load() <= g.step {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return pg.Completed(ctx.Err())
		}
	}
	pg.View[float64](t)[0] = 1
	return pg.Completed(nil)
}

// waitAlone waits until the voteAlone replica has committed, and a little
// more, so that its next quorum request is in when the caller's arrives.
func (h *harness) waitAlone(ctx context.Context) {
	for !h.aloneDone.Load() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
}

// replay applies the records in one process: from the primary's initial
// weights (the only participant of step 0, init_sync), each step the
// participants' gradients on their samples, summed in order and divided.
// It also checks that every sample is in exactly one committed step.
func replay(t *testing.T, recs []record, ordered bool) *toyState {
	if len(recs) == 0 {
		t.Fatal("nothing committed")
	}
	if len(recs[0].Participants) != 1 {
		t.Fatalf("step 0 had participants %v; with init_sync only the primary takes it", recs[0].Participants)
	}
	s := newToyState(recs[0].Participants[0])
	for _, rec := range recs {
		if rec.Cursor != s.cursor {
			t.Fatalf("step %d began at sample %d; the steps before it consumed %d", rec.Step, rec.Cursor, s.cursor)
		}
		sum := make([]float64, toyDim)
		for k := range rec.Participants {
			for j, v := range toyGrad(s.w, s.cursor+int64(k*toyBatch)) {
				sum[j] += v
			}
		}
		for j := range sum {
			sum[j] /= float64(len(rec.Participants))
		}
		s.update(sum, len(rec.Participants))
		s.step++
	}
	return s
}

func (h *harness) totals() (committed, discarded, recoveries int64) {
	for _, r := range h.all {
		committed += r.stats.Committed
		discarded += r.stats.Discarded
		recoveries += r.stats.Recoveries
	}
	return
}

func TestFaultsHealthy(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 2, steps: 8, ordered: ordered})
		})
	}
}

func TestFaultsReplicaDiesAndRestarts(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 1, steps: 60, ordered: true,
		events:   map[string]map[int64]event{"b": {4: evDie}},
		restarts: map[string]time.Duration{"b": 300 * time.Millisecond},
		check: func(t *testing.T, h *harness) {
			if _, _, rec := h.totals(); rec < 1 {
				t.Errorf("the restarted replica never recovered: %d recoveries", rec)
			}
		}})
}

func TestFaultsFailedAllReduceDiscardsEverywhere(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 2, steps: 8, ordered: true,
		events: map[string]map[int64]event{"a": {3: evFailStep}},
		check: func(t *testing.T, h *harness) {
			for _, r := range h.live() {
				if r.stats.Discarded < 1 {
					t.Errorf("replica %s discarded no step; a's failure at step 3 must discard it everywhere", r.id)
				}
			}
		}})
}

func TestFaultsLateJoiner(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 1, steps: 60, ordered: true,
		starts: map[string]time.Duration{"c": 300 * time.Millisecond},
		check: func(t *testing.T, h *harness) {
			if len(h.live()) != 3 {
				t.Errorf("%d replicas finished, want 3 (the late one heals and joins)", len(h.live()))
			}
		}})
}

func TestFaultsTwoDieAtOnce(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c", "d"}, minReplicas: 1, steps: 10, ordered: true,
		events: map[string]map[int64]event{"b": {3: evDie}, "c": {3: evDie}}})
}

func TestFaultsStalledReplica(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 1, steps: 150, ordered: false,
		events: map[string]map[int64]event{"c": {3: evStall}},
		check: func(t *testing.T, h *harness) {
			if len(h.live()) != 3 {
				t.Errorf("%d replicas finished, want 3 (the stalled one rejoins)", len(h.live()))
			}
		}})
}

// TestFaultsVoteCompletesAlone: c's commit vote at step 5 completes on c
// alone (frozen in it, it thaws to find the votes waiting), after a and b
// gave up on it and committed step 5 again without it; the three then meet
// at step 6 with two histories, and c heals onto a and b's (Note [the
// commit chain]).
func TestFaultsVoteCompletesAlone(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 1, steps: 20, ordered: true,
		voteAlone: map[string]int64{"c": 5}, hold: map[string]int64{"a": 6, "b": 6},
		check: func(t *testing.T, h *harness) {
			c := h.rs["c"].records
			healed := slices.ContainsFunc(c[1:], func(r record) bool { // a commit not on c's own last one
				i := slices.IndexFunc(c, func(p record) bool { return p.Step == r.Step-1 })
				return r.Step > 5 && i >= 0 && c[i].Chain != r.Parent
			})
			if len(h.live()) != 3 || !healed {
				t.Errorf("%d replicas finished; want 3, and c healed off its lone commit of step 5: c's commits %+v",
					len(h.live()), c)
			}
		}})
}

func TestFaultsRecoverySourceDiesMidTransfer(t *testing.T) {
	runPlan(t, plan{replicas: []string{"a", "b", "c"}, minReplicas: 1, steps: 60, ordered: true, pad: 1 << 20,
		startAfter: map[string]int64{"c": 15}, // b has healed by then, and a and b serve c from step 15
		events:     map[string]map[int64]event{"a": {10: evDieServing}, "b": {10: evDieServing}},
		check: func(t *testing.T, h *harness) {
			live := h.live()
			if len(live) != 2 || live[1].id != "c" {
				t.Fatalf("finished: %d replicas; want c and the source that did not die", len(live))
			}
			if h.rs["c"].stats.FailedRecoveries == 0 {
				t.Errorf("c never saw its recovery fail: discards %v", h.rs["c"].discards)
			}
			if h.rs["c"].stats.Recoveries != 1 {
				t.Errorf("c recovered %d times, want 1 (from the surviving source)", h.rs["c"].stats.Recoveries)
			}
		}})
}
