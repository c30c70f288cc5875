package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/tcp"
)

// joinWorker joins the job its environment describes with
// ddp.InitProcessGroup, as
// cmd/ddp-train's workers do, and exits: 0 once joined, 2 on a duplicate
// rank (bad input), 1 on any other error, which it prints.
func joinWorker() {
	e, err := env.FromLookup(os.LookupEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var m *ddp.Group
		if m, err = ddp.InitProcessGroup(ctx,
			ddp.InitOptions{Env: &e, Timeout: 30 * time.Second, TCP: tcp.Options{ListenAddr: "127.0.0.1:0"}}); err == nil {
			m.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		if errors.Is(err, tcp.ErrDuplicateRank) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	os.Exit(0)
}

// TestJoinDuplicateRank: three processes with RANK 0, 1 and 1 of
// WORLD_SIZE=3 meet at rank 0's TCPStore. Each exits within seconds with
// an error that names rank 1 and both processes that claimed it (their
// pids), instead of all three timing out.
func TestJoinDuplicateRank(t *testing.T) {
	jobEnv, err := StandaloneEnv(3)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, 3)
	outs := make([]*bytes.Buffer, 3)
	start := time.Now()
	for i, rank := range []string{"0", "1", "1"} {
		cmds[i] = exec.Command(self)
		cmds[i].Env = append(append(os.Environ(), jobEnv...), "RANK="+rank, "LOCAL_RANK="+rank, workerEnv+"=join")
		outs[i] = new(bytes.Buffer)
		cmds[i].Stderr = outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		defer cmds[i].Process.Kill()
	}
	pids := []string{strconv.Itoa(cmds[1].Process.Pid), strconv.Itoa(cmds[2].Process.Pid)}
	for i, cmd := range cmds {
		err := cmd.Wait()
		took := time.Since(start)
		out := strings.TrimSpace(outs[i].String())
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("process %d exited with %v after %v; want status 2 for a duplicate rank:\n%s", i, err, took, out)
			continue
		}
		if took > 8*time.Second {
			t.Errorf("process %d took %v to fail", i, took)
		}
		if !strings.Contains(out, "rank 1 is claimed by two processes") ||
			!strings.Contains(out, "pid "+pids[0]) || !strings.Contains(out, "pid "+pids[1]) {
			t.Errorf("process %d's error does not name rank 1 and both its processes (pids %v):\n%s", i, pids, out)
		}
		t.Logf("process %d, after %v: %s", i, took.Round(time.Millisecond), out)
	}
}
