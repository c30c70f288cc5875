package ft

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef-test")

// fastOptions are quick enough for tests with real sockets and clocks.
func fastOptions(minReplicas int) Options {
	o := DefaultOptions(minReplicas)
	o.QuorumTick = 5 * time.Millisecond
	return o
}

func startServer(t *testing.T, addr string, o Options) *Server {
	t.Helper()
	s, err := NewServer(context.Background(), addr, testSecret, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newClient(t *testing.T, addr, id string, secret []byte) *Client {
	t.Helper()
	opt := ClientOptions{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	c, err := NewClient(addr, secret, id, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// quorumAll asks for a quorum from each of ids' clients at once.
func quorumAll(ctx context.Context, t *testing.T, addr string, ids []string) ([]Quorum, []error) {
	t.Helper()
	qs, errs := make([]Quorum, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		c := newClient(t, addr, id, testSecret)
		wg.Go(func() { qs[i], errs[i] = c.Quorum(ctx, Member{Step: int64(i), WorldSize: 2}) })
	}
	wg.Wait()
	return qs, errs
}

// TestServerSameQuorum: clients in goroutines over real sockets all get
// one quorum, holding them all.
func TestServerSameQuorum(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", fastOptions(3))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := []string{"r2", "r0", "r1"}
	qs, errs := quorumAll(ctx, t, s.Addr(), ids)
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("%s: %v", ids[i], errs[i])
		}
		if qs[i].ID != 1 || !slices.Equal(qs[i].IDs(), []string{"r0", "r1", "r2"}) || qs[i].MaxStep() != 2 {
			t.Errorf("%s got %v, want quorum 1 [r0 r1 r2] max_step 2", ids[i], qs[i])
		}
	}
	c := newClient(t, s.Addr(), "r0", testSecret)
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.QuorumID != 1 || !slices.Equal(st.Healthy, []string{"r0", "r1", "r2"}) {
		t.Errorf("status %+v (%v), want quorum 1 and three healthy", st, err)
	}
}

// TestServerRefusesWrongSecret: a client with another secret, and a
// request with no signature, get 401 and a message naming the cause, at
// once (no retries).
func TestServerRefusesWrongSecret(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", fastOptions(1))
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := newClient(t, s.Addr(), "r0", []byte("another secret of the job"))
	_, err := bad.Quorum(ctx, Member{})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnauthorized || !strings.Contains(se.Message, "GODDP_SECRET") {
		t.Fatalf("wrong secret: %v, want a 401 naming GODDP_SECRET", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the refusal was retried until the deadline")
	}
	resp, err := http.Post("http://"+s.Addr()+PathHeartbeat, "application/json", strings.NewReader(`{"replica_id":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned heartbeat: %d, want 401", resp.StatusCode)
	}
	if st := s.Lighthouse().Status(); len(st.Heartbeats) != 0 || st.QuorumID != 0 {
		t.Errorf("refused requests changed the state: %+v", st)
	}
	if _, err := NewServer(ctx, "127.0.0.1:0", []byte("short"), fastOptions(1)); err == nil {
		t.Error("a server started with a 5-byte secret")
	}
}

// TestServerRestart: the lighthouse dies while two replicas wait; a new
// one on the same address knows nothing, the waiting clients retry and
// re-register, and with the third they get the new lighthouse's first
// quorum.
func TestServerRestart(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", fastOptions(3))
	addr := s.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		q   Quorum
		err error
	}
	res := make(chan result, 2)
	for _, id := range []string{"r0", "r1"} {
		c := newClient(t, addr, id, testSecret)
		go func() {
			q, err := c.Quorum(ctx, Member{Step: 5})
			res <- result{q, err}
		}()
	}
	for len(s.Lighthouse().Status().Participants) < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, addr, fastOptions(3))
	defer s2.Close()
	if st := s2.Lighthouse().Status(); len(st.Heartbeats) > 2 || st.QuorumID != 0 {
		t.Fatalf("the new lighthouse has state: %+v", st)
	}
	q, err := newClient(t, addr, "r2", testSecret).Quorum(ctx, Member{Step: 5})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.q.ID != q.ID || !slices.Equal(r.q.IDs(), q.IDs()) {
			t.Errorf("quorums differ: %v and %v", r.q, q)
		}
	}
	if q.ID != 1 || len(q.Members) != 3 {
		t.Errorf("after the restart: %v, want quorum 1 of three", q)
	}
}

// TestClientQuorumBoundedByContext: a Quorum that cannot form, and one
// against no lighthouse at all, return ctx's error.
func TestClientQuorumBoundedByContext(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", fastOptions(2))
	defer s.Close()
	for _, addr := range []string{s.Addr(), "127.0.0.1:1"} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err := newClient(t, addr, "r0", testSecret).Quorum(ctx, Member{})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v, want the deadline", addr, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: returned after %v", addr, d)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(s.Lighthouse().Status().Participants) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the request that gave up is still a participant")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClientHeartbeats keeps a replica healthy until its context ends.
func TestClientHeartbeats(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", fastOptions(1))
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c := newClient(t, s.Addr(), "r0", testSecret)
	done := make(chan error, 1)
	go func() { done <- c.Heartbeats(ctx, 5*time.Millisecond) }()
	for !slices.Contains(s.Lighthouse().Status().Healthy, "r0") {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Heartbeats: %v, want context.Canceled", err)
	}
	if _, err := NewClient(s.Addr(), testSecret, "r0", ClientOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := c.Quorum(context.Background(), Member{ReplicaID: "other"}); err == nil {
		t.Error("a client asked for another replica")
	}
}
