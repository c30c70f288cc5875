package ft

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTestLighthouse is a Lighthouse on a fake clock; Run is not called,
// so only Join's own tick and the test's Tick form quorums.
func newTestLighthouse(t *testing.T, minReplicas int, joinTimeout time.Duration) (*Lighthouse, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: t0}
	o := DefaultOptions(minReplicas)
	o.JoinTimeout, o.Now = joinTimeout, clk.Now
	l, err := NewLighthouse(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l, clk
}

type joined struct {
	q   Quorum
	err error
}

// join starts a Join and waits until the Lighthouse has m as a
// participant (or has already answered it).
func join(t *testing.T, l *Lighthouse, m Member) <-chan joined {
	t.Helper()
	ch := make(chan joined, 1)
	go func() {
		q, err := l.Join(context.Background(), m)
		ch <- joined{q, err}
	}()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if slices.Contains(l.Status().Participants, m.ReplicaID) || len(ch) > 0 {
			return ch
		}
	}
	t.Fatalf("%s never became a participant", m.ReplicaID)
	return nil
}

func wait(t *testing.T, ch <-chan joined) Quorum {
	t.Helper()
	select {
	case j := <-ch:
		if j.err != nil {
			t.Fatal(j.err)
		}
		return j.q
	case <-time.After(5 * time.Second):
		t.Fatal("no quorum")
		return Quorum{}
	}
}

func pending(ch <-chan joined) bool { return len(ch) == 0 }

// TestLighthouseJoinDuringShrink ports test_lighthouse_join_during_shrink:
// a newcomer waits while a member asks with shrink_only, and joins at the
// next step.
func TestLighthouseJoinDuringShrink(t *testing.T) {
	l, _ := newTestLighthouse(t, 2, time.Second)
	a, b := join(t, l, member("replica0", 1)), join(t, l, member("replica1", 1))
	if q := wait(t, b); !slices.Equal(q.IDs(), []string{"replica0", "replica1"}) || q.Members[1].Step != 1 {
		t.Fatalf("first quorum %v", q)
	}
	wait(t, a)
	j := join(t, l, member("joiner", 1))
	r0 := member("replica0", 2)
	r0.ShrinkOnly = true
	a, b = join(t, l, r0), join(t, l, member("replica1", 2))
	if q := wait(t, b); !slices.Equal(q.IDs(), []string{"replica0", "replica1"}) || q.Members[1].Step != 2 {
		t.Fatalf("shrink-only quorum %v, want the joiner kept out", q)
	}
	wait(t, a)
	if !pending(j) {
		t.Fatal("the joiner got a quorum it is not in")
	}
	a, b = join(t, l, member("replica0", 3)), join(t, l, member("replica1", 3))
	q := wait(t, b)
	if !slices.Equal(q.IDs(), []string{"joiner", "replica0", "replica1"}) || q.Members[2].Step != 3 {
		t.Fatalf("third quorum %v, want the joiner in", q)
	}
	wait(t, a)
	if jq := wait(t, j); jq.ID != q.ID || len(jq.Members) != 3 {
		t.Fatalf("the joiner got %v, the others %v", jq, q)
	}
	if q.ID != 2 {
		t.Errorf("quorum id %d after one change of members, want 2", q.ID)
	}
}

// TestLighthouseCommitFailures ports test_lighthouse_commit_failures:
// the same members keep the id, a commit failure bumps it.
func TestLighthouseCommitFailures(t *testing.T) {
	l, _ := newTestLighthouse(t, 2, time.Second)
	step := func(failures int64) Quorum {
		m := member("replica1", 10)
		m.CommitFailures = failures
		a, b := join(t, l, member("replica0", 10)), join(t, l, m)
		wait(t, a)
		return wait(t, b)
	}
	for i := range 2 {
		if q := step(0); q.ID != 1 {
			t.Fatalf("stable quorum %d has id %d, want 1", i, q.ID)
		}
	}
	if q := step(2); q.ID != 2 || q.Members[1].CommitFailures != 2 {
		t.Fatalf("after commit failures: id %d, failures %d; want 2, 2", q.ID, q.Members[1].CommitFailures)
	}
}

// TestLighthouseJoinTimeout: a healthy replica that does not ask holds
// the quorum back for JoinTimeout, then the quorum forms without it.
func TestLighthouseJoinTimeout(t *testing.T) {
	l, clk := newTestLighthouse(t, 1, time.Minute)
	l.Heartbeat("c")
	a, b := join(t, l, member("a", 0)), join(t, l, member("b", 0))
	clk.Advance(59 * time.Second)
	for _, id := range []string{"a", "b", "c"} {
		l.Heartbeat(id)
	}
	l.Tick()
	if !pending(a) || !pending(b) {
		t.Fatal("a quorum formed before the join timeout while c is healthy")
	}
	clk.Advance(time.Second)
	l.Tick()
	if q := wait(t, a); !slices.Equal(q.IDs(), []string{"a", "b"}) {
		t.Fatalf("quorum %v, want [a b]", q)
	}
	wait(t, b)
}

// TestLighthouseHeartbeatExpiry: a member that stops heartbeating is
// left out of the next quorum once HeartbeatTimeout has passed, and the
// id changes.
func TestLighthouseHeartbeatExpiry(t *testing.T) {
	l, clk := newTestLighthouse(t, 1, time.Minute)
	l.Heartbeat("a")
	l.Heartbeat("b")
	a, b := join(t, l, member("a", 0)), join(t, l, member("b", 0))
	if q := wait(t, a); q.ID != 1 || len(q.Members) != 2 {
		t.Fatalf("first quorum %v, want quorum 1 [a b]", q)
	}
	wait(t, b)
	a = join(t, l, member("a", 1))
	l.Tick()
	if !pending(a) {
		t.Fatal("a quorum formed without b while b is healthy")
	}
	clk.Advance(DefaultHeartbeatTimeout)
	l.Heartbeat("a")
	l.Tick()
	if q := wait(t, a); q.ID != 2 || !slices.Equal(q.IDs(), []string{"a"}) {
		t.Fatalf("quorum %v, want quorum 2 [a]", q)
	}
}

// TestLighthouseJoinBoundedByContext: a Join that waits returns ctx's
// error and withdraws its request.
func TestLighthouseJoinBoundedByContext(t *testing.T) {
	l, _ := newTestLighthouse(t, 2, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Join(ctx, member("a", 0)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join: %v, want the deadline", err)
	}
	if p := l.Status().Participants; len(p) != 0 {
		t.Errorf("participants %v after the Join gave up", p)
	}
	ch := join(t, l, member("b", 0))
	l.Close()
	if j := <-ch; !errors.Is(j.err, ErrClosed) {
		t.Errorf("Join on a closed lighthouse: %v, want ErrClosed", j.err)
	}
}

// TestLighthouseMetrics: the gauges and the counter follow the quorums.
func TestLighthouseMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := DefaultOptions(1)
	o.Registerer = reg
	l, err := NewLighthouse(o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 3 {
		if _, err := l.Join(context.Background(), member("a", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 3 {
		t.Fatalf("%d metrics (%v), want 3", n, err)
	}
	if v := testutil.ToFloat64(l.metrics.quorums); v != 3 {
		t.Errorf("quorums_total %v, want 3", v)
	}
	if v := testutil.ToFloat64(l.metrics.id); v != 1 {
		t.Errorf("quorum_id %v, want 1 (the members never changed)", v)
	}
	if _, err := NewLighthouse(o); err == nil {
		t.Error("a second lighthouse registered the same metrics")
	}
}

// TestOptionsValidate refuses what torchft could not mean.
func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{DefaultOptions(0), {MinReplicas: 1, QuorumTick: time.Second},
		{MinReplicas: 1, JoinTimeout: -1, QuorumTick: 1, HeartbeatTimeout: 1}} {
		if _, err := NewLighthouse(o); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}
