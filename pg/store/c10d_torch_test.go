package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/store/storetest"
)

// torchServerPy serves real c10d TCPStores from PyTorch for the tests. It
// reads commands on stdin and answers each with one line:
//
//	new [uv|legacy]       -> port of a fresh TCPStore server (2.x: its backend)
//	set PORT KEY VALUE    -> "ok" (a torch client sets KEY)
//	get PORT KEY          -> the value (a torch client waits for KEY, 10 s)
//	add PORT KEY N        -> the new value
//
// It prints "torch VERSION" first and exits when stdin closes.
const torchServerPy = `
import datetime, sys
import torch
from torch.distributed import TCPStore
print("torch", torch.__version__, flush=True)
servers, clients = [], {}
def client(port):
    if port not in clients:
        clients[port] = TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))
    return clients[port]
for line in sys.stdin:
    f = line.split()
    try:
        if f[0] == "new":
            kw = {}
            if len(f) > 1:
                kw["use_libuv"] = f[1] == "uv"
            s = TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60), wait_for_workers=False, **kw)
            servers.append(s)
            print(s.port, flush=True)
        elif f[0] == "set":
            client(int(f[1])).set(f[2], f[3])
            print("ok", flush=True)
        elif f[0] == "get":
            print(client(int(f[1])).get(f[2]).decode(), flush=True)
        elif f[0] == "add":
            print(client(int(f[1])).add(f[2], int(f[3])), flush=True)
        else:
            print("error unknown command", flush=True)
    except Exception as e:
        print("error", repr(e).replace("\n", " "), flush=True)
`

// torchServer is a running torchServerPy.
type torchServer struct {
	t       *testing.T
	version string // torch.__version__
	in      io.WriteCloser
	out     *bufio.Scanner
}

// torchPython is the interpreter with torch: $GODDP_TORCH_PYTHON, else
// Debian's /usr/bin/python3 (python3-torch; scripts/test.sh installs it).
func torchPython() string {
	if p := os.Getenv("GODDP_TORCH_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// startTorch starts torchServerPy, or skips the test when torch cannot be
// imported.
func startTorch(t *testing.T) *torchServer {
	t.Helper()
	py := torchPython()
	if out, err := exec.Command(py, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Skipf("skipping: %s cannot import torch (%v: %s); install Debian's python3-torch (apt-get install -y "+
			"python3-torch, as scripts/test.sh does) or set GODDP_TORCH_PYTHON", py, err, strings.TrimSpace(string(out)))
	}
	script := filepath.Join(t.TempDir(), "torch_store_server.py")
	if err := os.WriteFile(script, []byte(torchServerPy), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
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
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	s := &torchServer{t: t, in: in, out: bufio.NewScanner(out)}
	first := s.line()
	v, ok := strings.CutPrefix(first, "torch ")
	if !ok {
		t.Fatalf("torch server: first line %q, want \"torch VERSION\"", first)
	}
	s.version = v
	return s
}

// line reads one answer, failing the test after 30 s.
func (s *torchServer) line() string {
	s.t.Helper()
	got := make(chan string, 1)
	go func() {
		if s.out.Scan() {
			got <- s.out.Text()
		}
		close(got)
	}()
	select {
	case l, ok := <-got:
		if !ok {
			s.t.Fatalf("torch server exited: %v", s.out.Err())
		}
		return l
	case <-time.After(30 * time.Second):
		s.t.Fatal("torch server: no answer within 30 s")
	}
	return ""
}

// cmd sends one command and returns its answer.
func (s *torchServer) cmd(format string, args ...any) string {
	s.t.Helper()
	if _, err := fmt.Fprintf(s.in, format+"\n", args...); err != nil {
		s.t.Fatal(err)
	}
	l := s.line()
	if strings.HasPrefix(l, "error") {
		s.t.Fatalf("torch server: %s", l)
	}
	return l
}

// newStore starts a fresh TCPStore server and returns its address.
func (s *torchServer) newStore(backend string) string {
	s.t.Helper()
	return "127.0.0.1:" + s.cmd("new %s", backend)
}

// wantProtocol is the protocol torch's version speaks.
func (s *torchServer) wantProtocol() store.C10dProtocol {
	if strings.HasPrefix(s.version, "1.") {
		return store.C10dV1
	}
	return store.C10dV2
}

// backends lists the server implementations to test: torch 1.x has one;
// 2.x has libuv (the default since 2.4) and the legacy poll loop.
func (s *torchServer) backends() []string {
	if s.wantProtocol() == store.C10dV1 {
		return []string{""}
	}
	return []string{"uv", "legacy"}
}

func dialC10d(t *testing.T, addr string, timeout time.Duration) *store.C10dClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := store.DialC10d(ctx, addr, store.C10dOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestC10dTorchSuite runs the store suite through the c10d client against
// real torch.distributed.TCPStore servers, one per subtest.
func TestC10dTorchSuite(t *testing.T) {
	ts := startTorch(t)
	t.Logf("torch %s: want protocol %v", ts.version, ts.wantProtocol())
	for _, backend := range ts.backends() {
		t.Run("backend="+backend, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
				addr := ts.newStore(backend)
				return func() store.Store {
					c := dialC10d(t, addr, timeout)
					if c.Protocol() != ts.wantProtocol() {
						t.Fatalf("detected protocol %v against torch %s, want %v", c.Protocol(), ts.version, ts.wantProtocol())
					}
					return c
				}
			})
		})
	}
}

// TestC10dTorchInterop: values cross between the Go client and torch's own
// client in both directions, through a PrefixStore as ddp-train uses it.
func TestC10dTorchInterop(t *testing.T) {
	ts := startTorch(t)
	for _, backend := range ts.backends() {
		t.Run("backend="+backend, func(t *testing.T) {
			addr := ts.newStore(backend)
			port := addr[strings.LastIndexByte(addr, ':')+1:]
			c := dialC10d(t, addr, 10*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ps := store.NewPrefixStore("goddp/run/0", c)

			// torch sets, Go waits for it (Get parks until the key exists).
			got := make(chan []byte, 1)
			go func() { v, _ := ps.Get(ctx, "addr/1"); got <- v }()
			time.Sleep(50 * time.Millisecond)
			ts.cmd("set %s goddp/run/0/addr/1 10.0.0.2:41000", port)
			if v := <-got; string(v) != "10.0.0.2:41000" {
				t.Fatalf("Go read %q for the key torch set", v)
			}
			// Go sets, torch reads.
			if err := ps.Set(ctx, "addr/0", []byte("10.0.0.1:40000")); err != nil {
				t.Fatal(err)
			}
			if v := ts.cmd("get %s goddp/run/0/addr/0", port); v != "10.0.0.1:40000" {
				t.Fatalf("torch read %q for the key Go set", v)
			}
			// Counters are shared, as decimal text.
			if n, err := ps.Add(ctx, "arrived", 1); err != nil || n != 1 {
				t.Fatalf("Add = %d, %v", n, err)
			}
			if v := ts.cmd("add %s goddp/run/0/arrived 1", port); v != "2" {
				t.Fatalf("torch add = %s, want 2", v)
			}
			if v, err := ps.Get(ctx, "arrived"); err != nil || string(v) != "2" {
				t.Fatalf("Get(arrived) = %q, %v", v, err)
			}
			if ok, err := c.Check(ctx, "goddp/run/0/arrived", "goddp/run/0/addr/0"); err != nil || !ok {
				t.Fatalf("Check of present keys = %v, %v", ok, err)
			}
			if ok, err := c.Check(ctx, "goddp/run/0/arrived", "nope"); err != nil || ok {
				t.Fatalf("Check with a missing key = %v, %v", ok, err)
			}
			// The detection left nothing behind: only the keys above exist.
			if n, err := c.NumKeys(ctx); err != nil || n != 3 {
				t.Fatalf("NumKeys = %d, %v; want 3", n, err)
			}
			// The protocol named instead of detected.
			named, err := store.DialC10d(ctx, addr, store.C10dOptions{Protocol: ts.wantProtocol()})
			if err != nil {
				t.Fatal(err)
			}
			defer named.Close()
			if v, err := named.Get(ctx, "goddp/run/0/addr/1"); err != nil || string(v) != "10.0.0.2:41000" {
				t.Fatalf("with Protocol %v: Get = %q, %v", ts.wantProtocol(), v, err)
			}
		})
	}
}

// TestC10dTorchBigValueAndLimits: a value of 1 MiB round-trips; a key over
// the server's limit is refused before it is sent, with a clear error.
func TestC10dTorchBigValueAndLimits(t *testing.T) {
	ts := startTorch(t)
	c := dialC10d(t, ts.newStore(ts.backends()[0]), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := c.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "big"); err != nil || string(v) != string(big) {
		t.Fatalf("Get(big): %d bytes, %v", len(v), err)
	}
	if err := c.Set(ctx, strings.Repeat("k", 9000), nil); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("Set of a 9000-byte key: %v; want pg.ErrInvalidArgument", err)
	}
	// The client still works.
	if v, err := c.Get(ctx, "big"); err != nil || len(v) != len(big) {
		t.Fatalf("Get after a refusal: %d bytes, %v", len(v), err)
	}
}
