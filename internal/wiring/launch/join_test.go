package launch

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// agentStore starts a torch.distributed.TCPStore server, as torchrun's
// agent does, and returns its port; it skips the test without torch.
func agentStore(t *testing.T) string {
	t.Helper()
	py := os.Getenv("GODDP_TORCH_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if err := exec.Command(py, "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("skipping: %s cannot import torch (%v); install python3-torch, as scripts/test.sh does", py, err)
	}
	cmd := exec.Command(py, "-c", `import datetime, sys
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.read()`)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		port <- sc.Text()
	}()
	select {
	case p := <-port:
		return p
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the torch TCPStore did not start within 30 s")
	}
	return ""
}

// TestJoinAgentStore: two ranks join through a torch TCPStore
// (ddp.InitProcessGroup), as under
// torchrun's static rendezvous: neither hosts a store, goddp's keys land
// under goddp/RUN_ID/RESTART_COUNT, and an allreduce works over the
// authenticated data plane. A restart joins afresh under the next prefix.
func TestJoinAgentStore(t *testing.T) {
	port := agentStore(t)
	secret := []byte("join-agent-store-secret-0123456789")
	for restart := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		members := make([]*ddp.Group, 2)
		errs := make(chan error, 2)
		for r := range 2 {
			e := env.Config{Rank: r, WorldSize: 2, MasterAddr: "127.0.0.1", Secret: secret,
				UseAgentStore: true, RunID: "job-7", RestartCount: restart, Source: env.SourceTorchrun}
			e.MasterPort = atoi(t, port)
			go func() {
				m, err := ddp.InitProcessGroup(ctx,
					ddp.InitOptions{Env: &e, Timeout: 10 * time.Second, TCP: tcp.Options{ListenAddr: "127.0.0.1:0"}})
				members[r] = m
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range members {
			if m.StoreHost() != pg.NoPeer {
				t.Fatalf("StoreHost = %d under the agent's store, want pg.NoPeer", m.StoreHost())
			}
		}
		c, err := store.DialC10d(ctx, "127.0.0.1:"+port, store.C10dOptions{})
		if err != nil {
			t.Fatal(err)
		}
		prefix := env.Config{RunID: "job-7", RestartCount: restart}.AgentPrefix() + "/"
		for _, k := range []string{"tcp/addr/0", "tcp/addr/1"} {
			v, err := c.Get(ctx, prefix+k)
			if err != nil || len(v) == 0 {
				t.Fatalf("Get(%s%s) = %q, %v", prefix, k, v, err)
			}
			if strings.Contains(string(v), string(secret)) {
				t.Fatalf("the agent's store holds the secret under %s%s", prefix, k)
			}
		}
		c.Close()
		done := make(chan error, 2)
		for _, m := range members {
			go func() {
				x := []float32{float32(m.Rank() + 1)}
				err := m.AllReduce(ctx, pg.Float32s(x), pg.Op(pg.Sum)).Wait(ctx)
				if err == nil && x[0] != 3 {
					err = errors.New("allreduce gave a wrong sum")
				}
				done <- err
			}()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range members {
			m.Close()
		}
	}
}

// TestJoinAgentStoreNeedsSecret: no GODDP_SECRET under the agent's store
// is refused before anything is dialled, saying what to export.
func TestJoinAgentStoreNeedsSecret(t *testing.T) {
	e := env.Config{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 1, UseAgentStore: true}
	_, err := ddp.InitProcessGroup(context.Background(), ddp.InitOptions{Env: &e})
	if !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), "export GODDP_SECRET") {
		t.Fatalf("err = %v; want pg.ErrInvalidArgument saying to export GODDP_SECRET", err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("port %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}
