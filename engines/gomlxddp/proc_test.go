package gomlxddp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// workerEnv, when set to "rank size storeAddr optimizer steps rows",
// makes this test binary one rank of a data-parallel run instead of
// running tests: it joins the group through the TCPStore at storeAddr,
// trains, and prints its rankResult as JSON (float64s round-trip
// exactly through encoding/json, so the bits can be compared).
const workerEnv = "GODDP_GOMLX_TEST_WORKER"

var workerSecret = []byte("gomlxddp-proc-secret-0123456789")

func runWorker(spec string) int {
	var rank, size, steps, rows int
	var addr, opt string
	if _, err := fmt.Sscanf(spec, "%d %d %s %s %d %d", &rank, &size, &addr, &opt, &steps, &rows); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: addr, Secret: workerSecret})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: store:", err)
		return 2
	}
	defer st.Close()
	g, err := tcp.New(ctx, st,
		tcp.Options{Rank: rank, Size: size, Secret: workerSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: tcp.New:", err)
		return 2
	}
	defer g.Close()
	o, err := optimizerByName(opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	res, err := trainRank(g, o, steps, rows, gomlxddp.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker rank %d: %v\n", rank, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	return 0
}

// TestProcesses: the same as TestSameAsOneProcess with every rank a
// process of its own, meeting through a TCPStore, over tcp.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const steps, rows = 8, 12
	for _, opt := range []string{"sgd", "adam"} {
		_, want := reference(t, opt, steps, rows)
		for _, size := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", opt, size), func(t *testing.T) {
				got := runProcesses(t, opt, size, steps, rows)
				checkClose(t, got[0].Params, want, 1e-9)
				for r := 1; r < size; r++ {
					checkBitwise(t, r, got[r].Params, got[0].Params)
				}
			})
		}
	}
}

func runProcesses(t *testing.T, opt string, size, steps, rows int) []rankResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: "127.0.0.1:0", IsServer: true, Secret: workerSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cmds := make([]*exec.Cmd, size)
	outs := make([]*bytes.Buffer, size)
	for r := range size {
		cmds[r] = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmds[r].Env = append(os.Environ(),
			fmt.Sprintf("%s=%d %d %s %s %d %d", workerEnv, r, size, st.Server().Addr(), opt, steps, rows))
		outs[r] = &bytes.Buffer{}
		cmds[r].Stdout, cmds[r].Stderr = outs[r], os.Stderr
		if err := cmds[r].Start(); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]rankResult, size)
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if err := json.Unmarshal(outs[r].Bytes(), &res[r]); err != nil {
			t.Fatalf("rank %d printed %q: %v", r, outs[r], err)
		}
	}
	return res
}
