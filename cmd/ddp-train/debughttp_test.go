package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
)

// startDebugJob starts a one-rank job (--backend local: one real
// process, which serves) that trains until stopped, with extra flags,
// and waits until /healthz answers on healthPort over loopback.
func startDebugJob(t *testing.T, healthPort int, extra ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self,
		args(append([]string{"--backend", "local", "--nproc", "1", "--steps", "1000000", "--log-every", "1000000"},
			extra...)...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	errOut := new(strings.Builder)
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopJob(t, cmd) })
	waitProbe(t, healthPort, "/healthz", http.StatusOK, errOut)
	return cmd, errOut
}

// getFrom GETs url and returns the status, the body and how long it took.
func getFrom(url string) (int, string, time.Duration) {
	start := time.Now()
	client := http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error(), time.Since(start)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// Note [debug endpoints are private], with a real process: --metrics-addr
// on every interface (as docs/launchers.md's Kubernetes examples) serves
// /metrics and the probes to a remote client, /debug/* only over
// loopback; profiles are capped and one runs at a time; a client that
// sends half its headers is cut off, and connections beyond the cap
// wait.
func TestDebugEndpointsPrivateByDefault(t *testing.T) {
	remote := nonLoopbackIP(t)
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd, errOut := startDebugJob(t, port, "--metrics-addr", fmt.Sprintf(":%d", port))
	local := fmt.Sprintf("http://127.0.0.1:%d", port)
	far := "http://" + net.JoinHostPort(remote, strconv.Itoa(port))
	slow := dialHalfHeaders(t, port)
	for _, path := range []string{"/metrics", "/healthz"} {
		if code, body, _ := getFrom(far + path); code != http.StatusOK {
			t.Errorf("%s from %s: %d %.200s", path, remote, code, body)
		}
	}
	for _, path := range []string{"/debug/state", "/debug/pprof/", "/debug/pprof/goroutine?debug=2",
		"/debug/pprof/cmdline", "/debug/flight"} {
		if code, body, _ := getFrom(far + path); code != http.StatusNotFound || !strings.Contains(body, "--debug-addr") {
			t.Errorf("%s from %s (not loopback): %d %.200s; want 404 naming --debug-addr", path, remote, code, body)
		}
	}
	for _, path := range []string{"/debug/state", "/debug/pprof/goroutine?debug=1", "/debug/flight"} {
		if code, body, _ := getFrom(local + path); code != http.StatusOK {
			t.Errorf("%s over loopback: %d %.200s\n%s", path, code, body, errOut)
		}
	}
	checkProfileLimits(t, local)
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, slow); err != nil {
		t.Errorf("a client that sent half its headers is still connected: %v", err)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections() // waitProbe's
	checkConnectionCap(t, port)
	checkDescriptorsBounded(t, cmd.Process.Pid, port)
}

// checkDescriptorsBounded: 185 keep-alive clients (enough to exhaust
// an uncapped worker's file descriptors) hold at most the cap's 32
// of the process's descriptors.
func checkDescriptorsBounded(t *testing.T, pid, port int) {
	t.Helper()
	fds := func() int {
		des, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Skipf("cannot count the process's descriptors: %v", err)
		}
		return len(des)
	}
	before := fds()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 185 {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	time.Sleep(500 * time.Millisecond)
	if n := fds(); n > before+32+2 {
		t.Errorf("185 keep-alive clients: the process holds %d descriptors, %d before; want at most 32 more", n, before)
	}
}

// checkProfileLimits: a profile longer than the cap is refused at once;
// of two at a time, the second is refused at once.
func checkProfileLimits(t *testing.T, base string) {
	t.Helper()
	if code, body, took := getFrom(base + "/debug/pprof/profile?seconds=99999999"); code != http.StatusBadRequest ||
		took > 5*time.Second {
		t.Errorf("profile?seconds=99999999: %d after %v %.200s; want 400 at once", code, took, body)
	}
	if code, body, took := getFrom(base + "/debug/pprof/trace?seconds=3600"); code != http.StatusBadRequest ||
		took > 5*time.Second {
		t.Errorf("trace?seconds=3600: %d after %v %.200s; want 400 at once", code, took, body)
	}
	var wg sync.WaitGroup
	var first int
	wg.Go(func() { first, _, _ = getFrom(base + "/debug/pprof/profile?seconds=2") })
	time.Sleep(500 * time.Millisecond)
	code, body, took := getFrom(base + "/debug/pprof/trace?seconds=1")
	wg.Wait()
	if first != http.StatusOK || code != http.StatusTooManyRequests || took > time.Second {
		t.Errorf("two profiles at once: the first %d, the second %d after %v (%.200s); want 200, and 429 at once", first,
			code, took, body)
	}
}

// checkConnectionCap opens as many idle keep-alive connections as the
// server holds: the next one is not served until one of them closes.
func checkConnectionCap(t *testing.T, port int) {
	t.Helper()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(held) < 32 {
		c := dialHealth(t, port, true)
		held = append(held, c)
	}
	extra := dialHealth(t, port, false)
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, _ := extra.Read(make([]byte, 1)); n != 0 {
		t.Fatalf("a 33rd connection was served while 32 idle ones were open")
	}
	held[0].Close()
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(extra); err != nil || !strings.Contains(string(b), "200 OK") {
		t.Fatalf("once a connection closed, the waiting one got %q %v", b, err)
	}
}

// dialHealth sends GET /healthz on a new connection; with wait, it reads
// the answer and leaves the connection open and idle.
func dialHealth(t *testing.T, port int, wait bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	hdr := "Connection: close\r\n"
	if wait {
		hdr = ""
	}
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n%s\r\n", hdr)
	if wait {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("idle connection %v: %v %v", c.LocalAddr(), resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	return c
}

// dialHalfHeaders connects and sends half a request's headers (slowloris).
func dialHalfHeaders(t *testing.T, port int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprint(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
	return c
}

// --debug-addr serves /debug/* to any client, there only: --metrics-addr
// then serves none, not even over loopback.
func TestDebugAddr(t *testing.T) {
	remote := nonLoopbackIP(t)
	mport, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dport, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, errOut := startDebugJob(t, mport, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mport), "--debug-addr",
		fmt.Sprintf(":%d", dport))
	if code, body, _ := getFrom(fmt.Sprintf("http://%s/debug/state", net.JoinHostPort(remote, strconv.Itoa(dport)))); code != http.StatusOK || !strings.Contains(body, `"rank"`) {
		t.Errorf("/debug/state on --debug-addr from %s: %d %.200s\n%s", remote, code, body, errOut)
	}
	if code, body, _ := getFrom(fmt.Sprintf("http://127.0.0.1:%d/debug/state", mport)); code != http.StatusNotFound {
		t.Errorf("/debug/state on --metrics-addr with --debug-addr: %d %.200s; want 404", code, body)
	}
}

// --debug-addr is checked as --metrics-addr is, and may not share its
// ports.
func TestDebugAddrFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--debug-addr", "127.0.0.1:9500"}, ""},
		{[]string{"--debug-addr", "bogus"}, `--debug-addr "bogus": want host:port`},
		{[]string{"--debug-addr", ":65535"}, "would serve on ports 65535 to 65536"},
		{[]string{"--debug-addr", ":9401", "--metrics-addr", ":9400"}, "both would use port 9401"},
		{[]string{"--debug-addr", "127.0.0.1:9400", "--metrics-addr", ":9400", "--backend", "local"},
			"both would use port 9400"},
		{[]string{"--debug-addr", "127.0.0.1:9400", "--metrics-addr", "10.0.0.1:9400"}, ""},
		{[]string{"--debug-addr", ":9402", "--metrics-addr", ":9400"}, ""},
	} {
		_, err := parseFlags(c.args, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !isUsage(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// nonLoopbackIP is one of this machine's addresses other than loopback,
// to reach a server as a remote client would, or the test is skipped.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses (%v): cannot reach this machine other than over loopback", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to reach it as a remote client would")
	return ""
}
