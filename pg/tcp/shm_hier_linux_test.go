//go:build linux

package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// labels returns a tweak that puts rank r on simulated host label(r).
func labels(label func(r int) string) func(*Options) {
	return func(o *Options) { o.hostLabel = label(o.Rank) }
}

// pairs puts ranks 2h and 2h+1 on host h: 4 ranks are 2 hosts × 2, 3
// ranks are 2 + 1.
func pairs(r int) string { return fmt.Sprint(r / 2) }

// TestHierLayout: ranks labelled onto simulated hosts share memory with
// exactly the ranks of their host, know every host's leader, and each
// logs one line saying which ranks it reaches over shared memory and
// which over TCP. A rank that switches shared memory off is a host of
// its own.
func TestHierLayout(t *testing.T) {
	for _, c := range []struct {
		name    string
		n       int
		label   func(r int) string
		off     int // a rank with NoSharedMemory, or -1
		hosts   [][]int
		leaders []int
	}{
		{"2x2", 4, pairs, -1, [][]int{{0, 1}, {2, 3}}, []int{0, 2}},
		{"2+1", 3, pairs, -1, [][]int{{0, 1}, {2}}, []int{0, 2}},
		{"interleaved", 6, func(r int) string { return string("aabacc"[r]) }, -1, [][]int{{0, 1, 3}, {2}, {4, 5}},
			[]int{0, 2, 4}},
		{"one off", 4, func(int) string { return "" }, 1, [][]int{{0, 2, 3}, {1}}, []int{0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cores := make([]*observer.ObservedLogs, c.n)
			gs := newGroups(t, c.n, time.Minute, func(o *Options) {
				o.hostLabel = c.label(o.Rank)
				o.NoSharedMemory = o.Rank == c.off
				core, logs := observer.New(zap.InfoLevel)
				cores[o.Rank] = logs
				o.Logger = zap.New(core)
			})
			for r, g := range gs {
				var host []int
				for _, h := range c.hosts {
					if slices.Contains(h, r) {
						host = h
					}
				}
				if g.hosts == nil || !slices.EqualFunc(g.hosts.Hosts, c.hosts, slices.Equal) ||
					!slices.Equal(g.hosts.Leaders, c.leaders) {
					t.Fatalf("rank %d: layout %+v, want hosts %v, leaders %v", r, g.hosts, c.hosts, c.leaders)
				}
				if len(host) == 1 {
					if g.shm != nil {
						t.Errorf("rank %d is alone on its host but has a shared-memory world %v", r, g.shm.Members())
					}
				} else if g.shm == nil || !slices.Equal(g.shm.Members(), host) || g.shm.Full() {
					t.Errorf("rank %d: shared-memory world %v, want %v", r, g.shm, host)
				} else {
					for j := range c.n {
						if s := g.shm.Segment(j); (s != nil) != slices.Contains(host, j) {
							t.Errorf("rank %d: segment of rank %d mapped = %v", r, j, s != nil)
						}
					}
				}
				lines := cores[r].FilterMessage("link transports").All()
				if len(lines) != 1 {
					t.Fatalf("rank %d: %d \"link transports\" lines, want 1", r, len(lines))
				}
				fields := lines[0].ContextMap()
				var wantShm, wantTCP []int
				for j := range c.n {
					switch {
					case j == r:
					case len(host) > 1 && slices.Contains(host, j):
						wantShm = append(wantShm, j)
					default:
						wantTCP = append(wantTCP, j)
					}
				}
				if got, want := fmt.Sprint(fields["shm"], fields["tcp"]), fmt.Sprint(ints(wantShm), ints(wantTCP)); got != want {
					t.Errorf("rank %d logs shm, tcp = %s, want %s", r, got, want)
				}
			}
			for _, length := range []int{1, 1000, 70000} {
				checkAllReduce(t, gs, length)
			}
		})
	}
}

// ints is what zap's observer shows for zap.Ints(s).
func ints(s []int) []any {
	out := []any{}
	for _, v := range s {
		out = append(out, v)
	}
	return out
}

// TestHierAllReduce runs the hierarchical allreduce with doubling and
// with the ring between the leaders, over layouts with hosts of 1 to 3
// ranks, with lengths that leave chunks of the ring empty and run past a
// shared-memory slot (several chunks, both slots, a short last one), and
// three calls in a row so that the slots are reused across collectives.
func TestHierAllReduce(t *testing.T) {
	for _, algo := range []struct {
		name      string
		threshold int
	}{{"ring", 1}, {"doubling", math.MaxInt}} {
		for _, c := range []struct {
			name  string
			n     int
			label func(r int) string
		}{
			{"2+1", 3, pairs},
			{"2x2", 4, pairs},
			{"1+3+1", 5, func(r int) string { return string("abbbc"[r]) }},
		} {
			t.Run(algo.name+"/"+c.name, func(t *testing.T) {
				gs := newGroups(t, c.n, time.Minute, func(o *Options) {
					o.RingThreshold = algo.threshold
					o.ChunkBytes = 4096
					o.hostLabel = c.label(o.Rank)
				})
				if gs[0].hosts == nil {
					t.Fatal("no host layout: the hierarchical allreduce would not run")
				}
				for _, length := range []int{1, c.n - 1, 16*c.n + 3, 2*shm.SlotBytes/4 + c.n + 1, 1000} {
					checkAllReduce(t, gs, length)
				}
			})
		}
	}
}

// TestHierConformance runs pgtest's suite on mixed layouts: 3 ranks as
// 2 + 1 and 4 ranks as 2 × 2 simulated hosts (the other world sizes are
// skipped: 1 and 2 ranks cannot be mixed, and the larger ones would only
// repeat these at the cost of time).
func TestHierConformance(t *testing.T) {
	pgtest.Run(t, func(tb testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		if n != 3 && n != 4 {
			tb.Skipf("world=%d: only 3 and 4 ranks are checked as mixed layouts", n)
		}
		gs := newGroups(tb, n, timeout, labels(pairs))
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			if g.hosts == nil || (g.shm == nil) != (i == 2 && n == 3) {
				tb.Fatalf("rank %d: not the mixed layout (hosts %+v, shm %v)", i, g.hosts, g.shm != nil)
			}
			out[i] = g
		}
		return out
	})
}

// TestHierMismatch: a member whose tensor differs from its leader's fails
// the leader with pg.ErrMismatch naming it, and the others fail too.
func TestHierMismatch(t *testing.T) {
	gs := newGroups(t, 4, 10*time.Second, labels(pairs))
	errs := each(gs, func(r int, g *Group) error {
		length := 1000
		if r == 3 {
			length = 1001
		}
		return g.AllReduce(context.Background(), pg.NewTensor(pg.Float32, length), pg.Op(pg.Sum)).Wait(context.Background())
	})
	wantNames(t, "leader 2", errs[2], 3, pg.ErrMismatch)
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d succeeded", r)
		}
	}
}

// TestHierSubgroups: a subgroup made of ranks of different hosts gets
// its own layout (a world of its own ranks only), and one within a host
// shares memory whole.
func TestHierSubgroups(t *testing.T) {
	gs := newGroups(t, 4, time.Minute, labels(pairs))
	for _, ranks := range [][]int{{0, 1}, {1, 2, 3}, {0, 2}} {
		subs := make([]pg.ProcessGroup, 4)
		errs := each(gs, func(r int, g *Group) error {
			var err error
			subs[r], err = g.NewGroup(context.Background(), ranks)
			return err
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("NewGroup(%v): rank %d: %v", ranks, r, err)
			}
		}
		var members []*Group
		for _, r := range ranks {
			members = append(members, subs[r].(*Group))
		}
		t.Cleanup(func() { closeGroups(members) })
		what := fmt.Sprint(ranks)
		switch what {
		case "[0 1]": // one host: shared memory, whole
			if members[0].shm == nil || !members[0].shm.Full() || members[0].hosts != nil {
				t.Errorf("%s: want one shared-memory world", what)
			}
		case "[1 2 3]": // subgroup ranks 0 | 1 2
			if h := members[0].hosts; h == nil || !slices.EqualFunc(h.Hosts, [][]int{{0}, {1, 2}}, slices.Equal) {
				t.Errorf("%s: layout %+v, want [[0] [1 2]]", what, h)
			}
		case "[0 2]": // two hosts, one rank each: TCP
			if members[0].shm != nil || members[0].hosts != nil {
				t.Errorf("%s: want TCP only", what)
			}
		}
		checkAllReduce(t, members, 3*shm.SlotBytes/8+5)
	}
}

// TestHierDeadMember: a member that closes while its leader waits for its
// input fails the leader naming it, well before the group timeout, and
// the other host's ranks hear of it.
func TestHierDeadMember(t *testing.T) {
	gs := newGroups(t, 4, time.Minute, labels(pairs))
	ctx := context.Background()
	works := make([]pg.Work, 4)
	for _, r := range []int{0, 2, 3} {
		works[r] = gs[r].AllReduce(ctx, pg.NewTensor(pg.Float32, 3<<20), pg.Op(pg.Sum))
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	gs[1].Close()
	for _, r := range []int{0, 2, 3} {
		err := works[r].Wait(ctx)
		wantNames(t, fmt.Sprintf("rank %d", r), err, 1, pg.ErrRemote, pg.ErrComm)
		if r == 0 && !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("rank 0: %v does not name rank 1", err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the survivors took %v to notice", took)
	}
	if err := works[0].Wait(ctx); errors.Is(err, pg.ErrTimeout) {
		t.Errorf("rank 0 timed out instead of noticing: %v", err)
	}
}

// hostID is the identity internal/shm publishes for this process's
// host: the boot id and the network namespace.
func hostID(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b)) + "/" + ns
}

// TestShmPeerUnreachable: rank 2 says it is on this host (same boot id)
// and that it mapped every peer's segment, but its socket cannot be
// reached, as from another network namespace. Ranks 0 and 1 fail to map
// its segment, agree to share memory between them alone, say why in
// their log line, and count rank 2 as a host of its own. (Rank 2 is a
// fake that speaks only the TCP handshake, so no collective runs.)
func TestShmPeerUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for k, v := range map[string]string{
		// The shared-memory keys as internal/shm publishes them.
		addrKey(2):     ln.Addr().String(),
		"tcp/shm/2":    hostID(t) + " @goddp-pg-tcp-nobody-listens-here",
		"tcp/shmmap/2": "0,1",
	} {
		if err := st.Set(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	fake, _ := Options{Rank: 2, Size: 3, Secret: testSecret, ListenAddr: "127.0.0.1:0"}.withDefaults()
	accepted := make(chan net.Conn, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if _, err := wire.ServerHandshake(c, testSecret); err == nil {
				wire.WriteFrame(c, wire.Header{Kind: kindHello}, helloOf(fake).encode())
			}
			accepted <- c
		}
	}()
	gs := make([]*Group, 2)
	logs := make([]*observer.ObservedLogs, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		core, l := observer.New(zap.InfoLevel)
		logs[r] = l
		wg.Go(func() {
			gs[r], errs[r] = New(ctx, st,
				Options{Rank: r, Size: 3, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute,
					Logger: zap.New(core)})
		})
	}
	wg.Wait()
	t.Cleanup(func() { closeGroups(gs) })
	for range 2 {
		select {
		case c := <-accepted:
			t.Cleanup(func() { c.Close() }) // first, so the groups' Close drains to EOF at once
		case <-time.After(10 * time.Second):
			t.Fatal("the fake rank 2 was never dialed")
		}
	}
	for r := range gs {
		if errs[r] != nil {
			t.Fatalf("rank %d: New: %v", r, errs[r])
		}
	}
	for r, g := range gs {
		if g.shm == nil || !slices.Equal(g.shm.Members(), []int{0, 1}) || g.shm.Segment(2) != nil {
			t.Errorf("rank %d: shared-memory world %+v, want ranks 0 and 1", r, g.shm)
		}
		if g.hosts == nil || !slices.EqualFunc(g.hosts.Hosts, [][]int{{0, 1}, {2}}, slices.Equal) {
			t.Errorf("rank %d: layout %+v, want [[0 1] [2]]", r, g.hosts)
		}
		lines := logs[r].FilterMessage("link transports").All()
		if len(lines) != 1 {
			t.Fatalf("rank %d: %d \"link transports\" lines, want 1", r, len(lines))
		}
		if why, _ := lines[0].ContextMap()["why"].(string); !strings.Contains(why, "mapping rank 2's segment") {
			t.Errorf("rank %d logs why = %q, want it to name rank 2's segment", r, why)
		}
	}
}

// TestHierTrafficBetweenLeaders: in a 2 × 2 layout, a 1 MiB allreduce
// (the ring between the leaders) and a 1 KiB one (recursive doubling)
// put data only on the connection between the leaders, ranks 0 and 2,
// as the kernel counts the bytes each socket received (TCP_INFO); every
// other connection, within a host or between a member and another host,
// carries nothing.
func TestHierTrafficBetweenLeaders(t *testing.T) {
	gs := newGroups(t, 4, time.Minute, labels(pairs))
	received := func() [4][4]uint64 {
		var out [4][4]uint64
		for r, g := range gs {
			for p, l := range g.links {
				if l == nil {
					continue
				}
				raw, err := l.conn.(*net.TCPConn).SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				var info *unix.TCPInfo
				raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
				if err != nil {
					t.Fatalf("TCP_INFO: %v", err)
				}
				out[r][p] = info.Bytes_received
			}
		}
		return out
	}
	for _, length := range []int{1 << 18, 256} {
		before := received()
		checkAllReduce(t, gs, length)
		after := received()
		for r := range 4 {
			for p := range 4 {
				got := after[r][p] - before[r][p]
				leaders := (r == 0 && p == 2) || (r == 2 && p == 0)
				if leaders && got < uint64(length*4/2) || !leaders && got != 0 {
					t.Errorf("%d floats: rank %d received %d bytes from rank %d", length, r, got, p)
				}
			}
		}
	}
}

// BenchmarkHierAllReduce compares, in one run, a float32 SUM allreduce
// on 4 ranks laid out as 2 simulated hosts × 2 ranks: hierarchical, with
// shared memory inside each host and TCP between the leaders ("shm"),
// against the same ranks on TCP alone ("tcp", every rank in the ring or
// recursive doubling). Compare the two us/op of each size.
//
//	go test -run '^$' -bench HierAllReduce -benchtime 20x ./pg/tcp/
func BenchmarkHierAllReduce(b *testing.B) {
	for _, bytes := range []int{4 << 10, 1 << 20, 64 << 20} {
		for _, mode := range []string{"shm", "tcp"} {
			b.Run(fmt.Sprintf("n=4/hosts=2/%s/%s", mode, sizeName(bytes)), func(b *testing.B) {
				benchAllReduce(b, 4, bytes, func(o *Options) {
					o.hostLabel = pairs(o.Rank)
					o.NoSharedMemory = mode == "tcp"
				})
			})
		}
	}
}
