package netbed_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
	"go.uber.org/goleak"
)

// The test binary doubles as the program run on the bed's hosts: with
// NETBED_HELPER set, TestMain runs helper instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("NETBED_HELPER"); mode != "" {
		os.Exit(helper(mode, os.Args[len(os.Args)-1]))
	}
	goleak.VerifyTestMain(m)
}

// helper is a tiny network program: "listen ADDR" accepts one
// connection and prints the hostname and the byte count it received;
// "send ADDR N" sends N bytes; "hold" builds a bed and then sleeps, so a
// test can kill it with SIGKILL.
func helper(mode, arg string) int {
	switch mode {
	case "listen":
		l, err := net.Listen("tcp", arg)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("listening")
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		n, _ := io.Copy(io.Discard, c)
		host, _ := os.Hostname()
		fmt.Println(host, n)
		return 0
	case "send":
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", arg)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		n, err := io.CopyN(c, zeros{}, 4<<20)
		c.Close()
		fmt.Println("sent", n, err)
		return 0
	case "resolve":
		addrs, err := net.LookupHost(arg)
		fmt.Println(addrs, err)
		return 0
	case "hold":
		b, err := netbed.New(context.Background(), netbed.Options{Hosts: 2})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("built", b.Hosts()[0].NS)
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func newBed(t *testing.T, o netbed.Options) *netbed.Bed {
	t.Helper()
	if err := netbed.Available(); err != nil {
		t.Skip(err)
	}
	o.Logf = t.Logf
	b, err := netbed.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// start runs the test binary's helper on host i and returns its stdout.
func start(t *testing.T, b *netbed.Bed, i int, mode, arg string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := b.Command(ctx, i, os.Args[0], arg)
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait() // a second Wait only errors
	})
	cmd.Env = append(os.Environ(), "NETBED_HELPER="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

func line(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("helper printed nothing: %v", sc.Err())
	}
	return sc.Text()
}

// transfer sends 4 MiB from host 1 to host 0 and returns what host 0
// reported and how long it took.
func transfer(t *testing.T, b *netbed.Bed) (string, time.Duration) {
	t.Helper()
	addr := b.Hosts()[0].Addr + ":7070"
	lc, lout := start(t, b, 0, "listen", addr)
	if got := line(t, lout); got != "listening" {
		t.Fatalf("listener: %s", got)
	}
	t0 := time.Now()
	sc, sout := start(t, b, 1, "send", addr)
	sent := line(t, sout)
	got := line(t, lout)
	took := time.Since(t0)
	if err := sc.Wait(); err != nil {
		t.Fatalf("sender: %v (%s)", err, sent)
	}
	if err := lc.Wait(); err != nil {
		t.Fatal(err)
	}
	return got, took
}

func TestHostsTalkUnderTheirOwnNames(t *testing.T) {
	b := newBed(t, netbed.Options{Hosts: 2})
	got, _ := transfer(t, b)
	if want := fmt.Sprintf("node0 %d", 4<<20); got != want {
		t.Fatalf("host 0 reported %q, want %q", got, want)
	}
	if h, _ := os.Hostname(); strings.HasPrefix(h, "node") {
		t.Fatalf("the machine's own hostname changed to %q", h)
	}
}

// TestHostsResolveEachOthersNames: on every host, each host's name
// resolves to its address (the bed's hosts file under /etc/netns); the
// machine's /etc/hosts is the same before, during and after, and Close
// removes the bed's files.
func TestHostsResolveEachOthersNames(t *testing.T) {
	before, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	b := newBed(t, netbed.Options{Hosts: 2})
	for i := range 2 {
		for _, h := range b.Hosts() {
			_, out := start(t, b, i, "resolve", h.Name)
			if got, want := line(t, out), "["+h.Addr+"] <nil>"; got != want {
				t.Fatalf("on node%d, %s resolves to %q, want %q", i, h.Name, got, want)
			}
		}
	}
	if after, _ := os.ReadFile("/etc/hosts"); string(after) != string(before) {
		t.Fatalf("the machine's /etc/hosts changed:\n%s", after)
	}
	ns := b.Hosts()[0].NS
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/netns/" + ns); !os.IsNotExist(err) {
		t.Fatalf("/etc/netns/%s is left after Close: %v", ns, err)
	}
}

func TestLinkDownPartitionsAndUpHeals(t *testing.T) {
	b := newBed(t, netbed.Options{Hosts: 2})
	ctx := context.Background()
	if err := b.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	_, sout := start(t, b, 1, "send", b.Hosts()[0].Addr+":7071")
	if got := line(t, sout); !strings.HasPrefix(got, "error:") {
		t.Fatalf("a host with its link down reached another: %s", got)
	}
	if err := b.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := transfer(t, b); !strings.HasSuffix(got, fmt.Sprint(4<<20)) {
		t.Fatalf("after the link came back: %q", got)
	}
}

// TestRateCapSlowsTheLink: 4 MiB at 100 Mbit/s takes at least 0.33 s;
// uncapped, a veth moves it in a few milliseconds.
func TestRateCapSlowsTheLink(t *testing.T) {
	b := newBed(t, netbed.Options{Hosts: 2, Rate: "100mbit"})
	_, took := transfer(t, b)
	if min := 300 * time.Millisecond; took < min {
		t.Fatalf("4 MiB over a 100 Mbit/s link took %v, less than %v: the cap does not hold", took, min)
	}
	if err := b.SetRate(context.Background(), 1, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.SetRate(context.Background(), 0, ""); err != nil {
		t.Fatal(err)
	}
	_, fast := transfer(t, b)
	t.Logf("4 MiB: %v capped at 100 Mbit/s, %v uncapped", took, fast)
	if fast >= took {
		t.Fatalf("uncapped (%v) was not faster than capped (%v)", fast, took)
	}
}

// TestSweepRemovesABedWhoseOwnerWasKilled: a process builds a bed and is
// killed with SIGKILL; the next New (here Sweep) removes what it left.
func TestSweepRemovesABedWhoseOwnerWasKilled(t *testing.T) {
	if err := netbed.Available(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-")
	cmd.Env = append(os.Environ(), "NETBED_HELPER=hold")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := line(t, bufio.NewScanner(out))
	ns, ok := strings.CutPrefix(got, "built ")
	if !ok {
		t.Fatalf("helper: %s", got)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !exists(ns) {
		t.Fatalf("namespace %s is gone before the sweep; the test proves nothing", ns)
	}
	if err := netbed.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(ns) {
		t.Fatalf("namespace %s of a killed process is still there after Sweep", ns)
	}
}

func exists(ns string) bool {
	_, err := os.Stat("/run/netns/" + ns)
	return err == nil
}

// TestCloseKillsWhatRunsOnTheHosts: a process still running on a host
// when the bed closes is killed, and nothing of the bed is left.
func TestCloseKillsWhatRunsOnTheHosts(t *testing.T) {
	if err := netbed.Available(); err != nil {
		t.Skip(err)
	}
	b, err := netbed.New(context.Background(), netbed.Options{Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ns := b.Hosts()[0].NS
	cmd := b.Command(context.Background(), 0, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a process on the host outlived Close")
	}
	if exists(ns) {
		t.Fatalf("namespace %s left after Close", ns)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	if err := netbed.Available(); err != nil {
		t.Skip(err)
	}
	for _, o := range []netbed.Options{{Hosts: 0}, {Hosts: 101}, {Hosts: 1, Rate: "fast"}} {
		if b, err := netbed.New(context.Background(), o); err == nil {
			b.Close()
			t.Errorf("New(%+v) built a bed", o)
		}
	}
}
