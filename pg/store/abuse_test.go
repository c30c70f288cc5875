package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg/internal/wire"
)

// floodEnv makes the test binary an idle flood (see TestMain): the value
// is "ADDR N".
const floodEnv = "GODDP_STORE_TEST_IDLE_FLOOD"

// runIdleFlood opens n connections to addr that never say a word and
// reconnect as soon as the server drops them, as a port scanner or a
// stray job might, until stdin closes; then it prints how many times they
// were dropped.
func runIdleFlood(spec string) {
	var addr string
	var n int
	fmt.Sscan(spec, &addr, &n)
	var dropped atomic.Int64
	for range n {
		go func() {
			for {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(time.Millisecond) // the listener's backlog is full
					continue
				}
				io.Copy(io.Discard, c) // until the server hangs up
				c.Close()
				dropped.Add(1)
			}
		}()
	}
	io.Copy(io.Discard, os.Stdin)
	fmt.Println(dropped.Load())
	os.Exit(0)
}

// idleFlood starts runIdleFlood in a process of its own, as the flood
// would come from, and returns a function that stops it and returns how
// many times its sockets were dropped.
func idleFlood(t *testing.T, addr string, n int) (stop func() int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", floodEnv, addr, n))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	dropped := 0
	stop = func() int {
		once.Do(func() {
			in.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("the flood: %v", err)
			}
			dropped, _ = strconv.Atoi(strings.TrimSpace(out.String()))
		})
		return dropped
	}
	t.Cleanup(func() { stop() })
	return stop
}

// rendezvousOf runs what ranks do at rendezvous through the store at
// addr: each connects, publishes its address, and reads every other
// rank's, concurrently (so each opens several connections). It returns
// how long the slowest rank took.
func rendezvousOf(t *testing.T, addr string, ranks int, timeout time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	errs := make(chan error, ranks*ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, addr, ClientOptions{Secret: secret})
			if err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			defer c.Close()
			if err := c.Set(ctx, fmt.Sprintf("addr/%d", r), []byte("10.0.0.1:1234")); err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			var peers sync.WaitGroup
			for j := range ranks {
				peers.Go(func() {
					if _, err := c.Get(ctx, fmt.Sprintf("addr/%d", j)); err != nil {
						errs <- fmt.Errorf("rank %d reading rank %d: %w", r, j, err)
					}
				})
			}
			peers.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return time.Since(start)
}

// TestTCPIdleFloodDoesNotDelayRendezvous: 300 idle sockets that reconnect
// when dropped, from the ranks' own host, hammer the store port while 4
// ranks meet through it. The ranks finish within 2 s (were pending
// connections not capped apart, Note [admission], such sockets would make it
// tens of seconds), and the log holds a bounded
// number of warnings however many connections were refused.
func TestTCPIdleFloodDoesNotDelayRendezvous(t *testing.T) {
	const sockets = 300
	srv, logs := startServer(t, ServerOptions{MaxConns: 256}) // a few hundred sockets show what 1,100 do to 1,024
	stop := idleFlood(t, srv.Addr(), sockets)
	waitFlooded(t, srv, sockets)

	took := rendezvousOf(t, srv.Addr(), 4, 60*time.Second)
	dropped := stop()
	warns := logs.FilterLevelExact(zapcore.WarnLevel).Len()
	t.Logf("rendezvous of 4 ranks took %v while %d idle sockets were dropped %d times; %d warning lines",
		took.Round(time.Millisecond), sockets, dropped, warns)
	if took > 2*time.Second {
		t.Errorf("rendezvous took %v during the flood; want under 2 s", took)
	}
	if dropped < sockets {
		t.Errorf("the server dropped idle sockets only %d times; the flood did not test the caps", dropped)
	}
	// The first refusal, at most one summary per interval (10 s), and the
	// one Close flushes, which says how many and from where.
	srv.Close()
	if warns := logs.FilterLevelExact(zapcore.WarnLevel).Len(); warns > 3 {
		t.Errorf("%d warning lines; want at most 3: %v", warns, messages(logs))
	}
	summary := logs.FilterMessageSnippet("more connections").All()
	if len(summary) == 0 || !strings.HasPrefix(summary[len(summary)-1].ContextMap()["from"].(string), "127.0.0.1: ") {
		t.Errorf("no summary of the refusals naming their host: %v", messages(logs))
	}
}

// waitFlooded waits until the server has shed n connections.
func waitFlooded(t *testing.T, srv *Server, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if srv.Stats().Shed >= n {
			return
		}
	}
	t.Fatalf("the server shed %d connections of the flood within 5 s, want %d", srv.Stats().Shed, n)
}

func messages(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel && len(out) < 10 {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestTCPPendingCapEvictsTheOldestSilent: over the per-host cap on
// pending connections, the oldest that has not sent a byte is closed;
// one that has started its handshake is not; when every pending
// connection has, the newcomer is closed instead.
func TestTCPPendingCapEvictsTheOldestSilent(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{MaxUnauthenticatedPerHost: 2, HandshakeTimeout: time.Second})
	greeted := func(c net.Conn) net.Conn {
		t.Helper()
		if _, err := io.ReadFull(c, make([]byte, 4+1+32)); err != nil {
			t.Fatalf("no greeting: %v", err)
		}
		return c
	}
	talking := greeted(rawConn(t, srv, nil))
	talking.Write(make([]byte, 10)) // a third of the handshake, then a pause
	silent := greeted(rawConn(t, srv, nil))
	newer := greeted(rawConn(t, srv, nil)) // evicts silent, not talking
	checkHungUp(t, silent)

	newer.Write(make([]byte, 10))
	waitHeard(t, srv, 2)
	last := rawConn(t, srv, nil) // both pending ones talk: last is closed
	if got := checkHungUp(t, last); len(got) != 0 {
		t.Fatalf("the server greeted a connection over the cap (%d bytes)", len(got))
	}
	for _, c := range []net.Conn{talking, newer} {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a pending connection that talks was closed: %v", err)
		}
	}
	checkWorks(t, dial(t, srv.Addr())) // once one of them times out or fails
}

// waitHeard waits until the server holds n pending connections, each of
// which it has read bytes from.
func waitHeard(t *testing.T, srv *Server, n int) {
	t.Helper()
	heard := func() (k int) {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for e := srv.adm.queue.Front(); e != nil; e = e.Next() {
			if e.Value.(*pending).heard.Load() {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if srv.Stats().Pending == n && heard() == n {
			return
		}
	}
	t.Fatalf("%d pending connections, %d heard from; want %d", srv.Stats().Pending, heard(), n)
}

// heapAfterGC is the live heap.
func heapAfterGC() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestTCPLargeFrameClaimsCostWhatArrives: 40 authenticated connections
// each announce a 16 MiB set. Announcing costs the server a 16 KiB chunk
// each, not 16 MiB (Note [frame budget]: 640 MiB in all); sending 1 MiB each
// (40 MiB) fills the 16 MiB budget (the oldest frame may go past it), the
// others wait; a small
// request still goes through meanwhile; and once they hang up every byte
// is released.
func TestTCPLargeFrameClaimsCostWhatArrives(t *testing.T) {
	const (
		conns  = 40
		claim  = 16 << 20
		send   = 1 << 20
		budget = 16 << 20 // the least there is: MaxFrame
	)
	srv, _ := startServer(t, ServerOptions{MaxInflight: budget})
	good := dial(t, srv.Addr())
	checkWorks(t, good)
	base := heapAfterGC()

	hdr := make([]byte, wire.HeaderSize)
	wire.Header{Kind: uint8(opSet), Seq: 1, Len: claim}.Put(hdr)
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = rawConn(t, srv, []byte(helloStore))
		cs[i].Write(hdr)
	}
	waitInflight(t, srv, func(n int64) bool { return n == conns*firstChunk })
	claimed := heapAfterGC() - base
	t.Logf("%d connections announcing %d MiB each: the live heap grew by %.1f MiB", conns, claim>>20,
		float64(claimed)/(1<<20))
	if claimed > 4<<20 {
		t.Errorf("announcing %d frames of %d MiB grew the live heap by %d bytes; want under 4 MiB", conns, claim>>20, claimed)
	}

	body := make([]byte, send)
	var writers sync.WaitGroup
	for _, c := range cs {
		writers.Go(func() {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			c.Write(body) // blocks once the server stops reading it
		})
	}
	waitInflight(t, srv, func(n int64) bool { return n >= budget/2 })
	time.Sleep(200 * time.Millisecond) // let every connection read what it can
	checkWorks(t, good)
	st := srv.Stats()
	sent := heapAfterGC() - base
	t.Logf("then sending %d MiB each: %.1f MiB in flight (peak %.1f MiB, budget %d MiB), the live heap grew by %.1f MiB",
		send>>20, float64(st.InflightBytes)/(1<<20), float64(st.PeakInflightBytes)/(1<<20), budget>>20, float64(sent)/(1<<20))
	if limit := int64(budget + claim + conns*firstChunk); st.PeakInflightBytes > limit {
		t.Errorf("peak of %d bytes in flight; want at most the budget, a frame and a first chunk per connection, %d",
			st.PeakInflightBytes, limit)
	}
	if sent > 3*budget {
		t.Errorf("the live heap grew by %d bytes with a budget of %d", sent, budget)
	}

	for _, c := range cs {
		c.Close()
	}
	writers.Wait()
	waitInflight(t, srv, func(n int64) bool { return n == 0 })
	checkWorks(t, good)
}

// waitInflight waits until the server's bytes in flight satisfy ok.
func waitInflight(t *testing.T, srv *Server, ok func(int64) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok(srv.Stats().InflightBytes) {
			return
		}
	}
	t.Fatalf("%d bytes in flight after 5 s", srv.Stats().InflightBytes)
}

// TestTCPFrameOverBudgetIsDropped: while the oldest frame holds the whole
// budget, a younger one that needs room waits, and is dropped with a
// warning saying why when none comes in time; the oldest completes.
func TestTCPFrameOverBudgetIsDropped(t *testing.T) {
	const size = 16 << 20
	srv, logs := startServer(t, ServerOptions{MaxInflight: size})
	srv.mu.Lock()
	srv.budget.wait = 300 * time.Millisecond
	srv.mu.Unlock()
	key := wire.AppendString(nil, "big")
	value := make([]byte, size-len(key)-4)
	payload := wire.AppendBytes(key, value)
	hdr := make([]byte, wire.HeaderSize)
	wire.Header{Kind: uint8(opSet), Seq: 1, Len: size}.Put(hdr)

	old := rawConn(t, srv, []byte(helloStore))
	old.Write(hdr)
	old.Write(payload[:size-1<<20])
	waitInflight(t, srv, func(n int64) bool { return n == size })
	young := rawConn(t, srv, []byte(helloStore))
	young.Write(hdr)
	young.Write(payload[:1<<20])

	e := waitLog(t, logs, zapcore.WarnLevel, "memory budget")
	if err, _ := e.ContextMap()["error"].(string); !strings.Contains(err, "MaxInflight is 16777216") {
		t.Errorf("the warning does not say what was full: %q", err)
	}
	checkHungUp(t, young)
	old.Write(payload[size-1<<20:])
	h, err := wire.ReadHeader(old, new([wire.HeaderSize]byte), 1<<20)
	if err != nil || h.Kind != statusOK {
		t.Fatalf("the oldest frame's set: %+v, %v", h, err)
	}
	waitInflight(t, srv, func(n int64) bool { return n == 0 })
}
