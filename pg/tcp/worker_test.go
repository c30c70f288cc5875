package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// workerEnv, when set to "rank size storeAddr", makes this test binary a
// worker rank instead of running tests: it joins the group through the
// TCPStore at storeAddr and runs allreduces until one fails, then prints
// "failed peer=P: err" and exits.
const workerEnv = "GODDP_TCP_TEST_WORKER"

// workerMain runs a worker if this process is one; it then exits.
func workerMain() bool {
	spec := os.Getenv(workerEnv)
	if spec == "" {
		return false
	}
	os.Exit(runWorker(spec))
	return true
}

func runWorker(spec string) int {
	var rank, size int
	var addr string
	if _, err := fmt.Sscanf(spec, "%d %d %s", &rank, &size, &addr); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad spec:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: addr, Secret: testSecret})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: store:", err)
		return 2
	}
	defer st.Close()
	g, err := New(ctx, st,
		Options{Rank: rank, Size: size, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: New:", err)
		return 2
	}
	defer g.Close()
	buf := pg.NewTensor(pg.Float32, 1<<20)
	for {
		if err := g.AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx); err != nil {
			var ce *pg.CollectiveError
			peer := pg.NoPeer
			if errors.As(err, &ce) {
				peer = ce.Peer
			}
			fmt.Printf("failed peer=%d: %v\n", peer, err)
			return 0
		}
	}
}

// devShm lists this package's entries in /dev/shm (other jobs on the
// machine, Open MPI's among them, may come and go there meanwhile).
func devShm() []string {
	es, _ := os.ReadDir("/dev/shm")
	var names []string
	for _, e := range es {
		if strings.Contains(e.Name(), "goddp") {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestKilledPeerProcess: three ranks, two of them separate processes,
// run 4 MiB ring allreduces back to back; rank 2's process is killed
// (SIGKILL) in the middle. The ranks share this host, so the allreduces
// run over shared memory where it is supported; /dev/shm must be
// unchanged afterwards. Rank 0 (this process) and rank 1 must both
// fail, naming rank 2, within a few seconds, not the minute-long group
// timeout.
func TestKilledPeerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	shmBefore := devShm()
	defer func() {
		// Segments are anonymous memfds: the kill, and the others' exits,
		// leave nothing behind.
		if after := devShm(); !slices.Equal(after, shmBefore) {
			t.Errorf("/dev/shm changed: before %v, after %v", shmBefore, after)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: "127.0.0.1:0", IsServer: true, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	const size = 3
	lines := make(chan string, 1)
	workers := make([]*exec.Cmd, size)
	for rank := 1; rank < size; rank++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", workerEnv, rank, size, st.Server().Addr()))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers[rank] = cmd
		if rank == 1 {
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
		}
	}
	defer func() {
		cancel()
		for _, w := range workers[1:] {
			w.Wait()
		}
	}()

	g, err := New(ctx, st,
		Options{Rank: 0, Size: size, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if (g.shm != nil) != shm.Supported {
		t.Errorf("shared memory in use = %v, want %v (every rank is on this host)", g.shm != nil, shm.Supported)
	}
	buf := pg.NewTensor(pg.Float32, 1<<20)
	for i := range 5 {
		if err := g.AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx); err != nil {
			t.Fatalf("allreduce %d before the kill: %v", i, err)
		}
	}

	w := g.AllReduce(ctx, buf, pg.Op(pg.Sum))
	if err := workers[2].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err = w.Wait(ctx)
	for err == nil && ctx.Err() == nil { // rank 2 may have done its part of that one
		err = g.AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx)
	}
	wantNames(t, "rank 0", err, 2, pg.ErrComm, pg.ErrRemote)
	if took := time.Since(killed); took > 5*time.Second {
		t.Errorf("rank 0 took %v to notice", took)
	}

	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "failed peer=2:") {
			t.Errorf("rank 1 reports %q; want it to fail naming rank 2", line)
		}
		if took := time.Since(killed); took > 5*time.Second {
			t.Errorf("rank 1 took %v to notice", took)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("rank 1 did not fail within 10 s of the kill")
	}
}
