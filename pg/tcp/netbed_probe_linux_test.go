package tcp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
	"github.com/goddp/ddp/pg/store"
)

// probeWorkerEnv, when set to "rank storeAddr listenIP", makes this test
// binary one of the two ranks of TestNetbedProbe: it joins the group
// (rank 0 hosts the TCPStore), prints "ready", then answers each line
// "probe" on its stdin with "reach R" for the other rank, until EOF.
const probeWorkerEnv = "GODDP_TCP_PROBE_WORKER"

func runProbeWorker(spec string) int {
	var rank int
	var addr, ip string
	if _, err := fmt.Sscanf(spec, "%d %s %s", &rank, &addr, &ip); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: addr, IsServer: rank == 0, Secret: testSecret})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: store:", err)
		return 2
	}
	defer st.Close()
	g, err := New(ctx, st, Options{Rank: rank, Size: 2, Secret: testSecret, ListenAddr: ip + ":0", Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: New:", err)
		return 2
	}
	defer g.Close()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && ctx.Err() == nil {
		pctx, stop := context.WithTimeout(ctx, time.Second)
		p := g.ProbePeer(pctx, 1-rank)
		stop()
		fmt.Printf("reach %v %v\n", p.Reach, p.Err)
	}
	return 0
}

// TestNetbedProbe: a rank on each of two netbed hosts probes the other
// (pg's Note [network or process]) through every state of the link and
// of the far process: up and running, answers; host 1's link down, no
// host from both sides (a timeout from host 0, no route from host 1);
// back up, answers; host 1's rank stopped, answers (its kernel accepts);
// killed, refused.
func TestNetbedProbe(t *testing.T) {
	b := netbed.ForTest(t, os.Getenv("GODDP_TEST_NETBED") == "1", netbed.Options{Hosts: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hosts := b.Hosts()
	var ranks [2]*probeRank
	for r := range 2 {
		ranks[r] = startProbeRank(ctx, t, b, r, hosts[0].Addr+":29612", hosts[r].Addr)
	}
	for r := range 2 {
		ranks[r].expect(t, "ready")
	}
	ranks[0].probe(t, "answers", time.Second)
	ranks[1].probe(t, "answers", time.Second)
	if err := b.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	ranks[0].probe(t, "no-host", 3*time.Second) // waits out its 1 s
	ranks[1].probe(t, "no-host", time.Second)   // no route: at once
	if err := b.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	// A link just brought up may drop the first packets (carrier, the
	// neighbour entry the down period failed): the host answers again
	// within a few seconds.
	ranks[0].probeUntil(t, "answers", 5*time.Second)
	pid := ranks[1].cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ranks[0].probe(t, "answers", time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = ranks[1].cmd.Wait()
	ranks[0].probe(t, "refused", time.Second)
	ranks[0].stdin.Close()
	if err := ranks[0].cmd.Wait(); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
}

type probeRank struct {
	rank  int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, closed at EOF
}

func startProbeRank(ctx context.Context, t *testing.T, b *netbed.Bed, r int, storeAddr, ip string) *probeRank {
	cmd := b.Command(ctx, r, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s", probeWorkerEnv, r, storeAddr, ip))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &probeRank{rank: r, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// expect waits up to 30 s for the rank's next line and checks that it
// starts with want.
func (p *probeRank) expect(t *testing.T, want string) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok || !strings.HasPrefix(line, want) {
			t.Fatalf("rank %d said %q (open %v), want %q", p.rank, line, ok, want)
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("rank %d said nothing in 30 s; want %q", p.rank, want)
	}
	return ""
}

// probeUntil has the rank probe the other, again after each other
// answer, until it answers want; it fails if that takes more than limit.
func (p *probeRank) probeUntil(t *testing.T, want string, limit time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		if _, err := io.WriteString(p.stdin, "probe\n"); err != nil {
			t.Fatal(err)
		}
		line := p.expect(t, "reach ")
		t.Logf("rank %d probing rank %d: %s (%v since the first try)", p.rank, 1-p.rank, line,
			time.Since(start).Round(time.Millisecond))
		if strings.HasPrefix(line, "reach "+want+" ") {
			return
		}
		if time.Since(start) > limit {
			t.Fatalf("rank %d's probes did not answer %q within %v", p.rank, want, limit)
		}
	}
}

// probe has the rank probe the other and checks the result and that it
// came within limit.
func (p *probeRank) probe(t *testing.T, want string, limit time.Duration) {
	t.Helper()
	start := time.Now()
	if _, err := io.WriteString(p.stdin, "probe\n"); err != nil {
		t.Fatal(err)
	}
	line := p.expect(t, "reach "+want+" ")
	took := time.Since(start)
	t.Logf("rank %d probing rank %d: %s (%v)", p.rank, 1-p.rank, line, took.Round(time.Millisecond))
	if took > limit {
		t.Fatalf("rank %d's probe took %v, more than %v", p.rank, took, limit)
	}
}
