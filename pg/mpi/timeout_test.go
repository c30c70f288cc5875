//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// TestTimeoutFailsThenAbortsTheJob starts a 2-rank job of this binary
// under mpirun in which rank 1 never joins rank 0's allreduce: rank 0's
// Work must fail with pg.ErrTimeout naming the op and its sequence
// number, and then MPI_Abort must end the whole job (mpirun exits non-zero
// long before rank 1's 60s sleep ends).
func TestTimeoutFailsThenAbortsTheJob(t *testing.T) {
	out := abortedJob(t, 2, "^TestTimeoutChild$", timeoutChildEnv+"=1")
	if !strings.Contains(out, "TIMEOUT-OK") {
		t.Fatalf("rank 0 did not report the timeout:\n%s", out)
	}
}

// abortedJob runs the tests run selects in an np-rank mpirun job of this
// binary, with env added to the environment, and wants MPI_Abort to end
// the job, well within 50s; it returns the job's output. It skips t where
// no job can be started: inside an MPI job, without mpirun, under -short.
func abortedJob(t *testing.T, np int, run string, env ...string) string {
	t.Helper()
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMIX_RANK") != "" {
		t.Skip("runs a job of its own; run the binary without mpirun to include it")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found")
	}
	if testing.Short() {
		t.Skip("starts an MPI job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), os.Args[0],
		"-test.run", run, "-test.v")
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Fatalf("the job ended successfully; want MPI_Abort to end it:\n%s", out)
	case ctx.Err() != nil:
		t.Fatalf("the job was still running after %v; MPI_Abort did not end it:\n%s", took, out)
	case !errors.As(err, &exit) || exit.ExitCode() != abortCode:
		// mpirun exits with the code given to MPI_Abort. (Its "MPI_ABORT
		// was invoked" banner is not reliable: Open MPI sometimes fails
		// to print it while the job is torn down.)
		t.Fatalf("the job failed (%v), but not through MPI_Abort(%d):\n%s", err, abortCode, out)
	}
	t.Logf("job aborted after %v, mpirun: %v", took.Round(time.Millisecond), err)
	return string(out)
}

// TestTimeoutChild is rank 0 and 1 of the job above.
func TestTimeoutChild(t *testing.T) {
	if os.Getenv(timeoutChildEnv) == "" {
		t.Skip("only in the job TestTimeoutFailsThenAbortsTheJob starts")
	}
	g := tw.g
	if g.Rank() != 0 {
		time.Sleep(60 * time.Second)
		return
	}
	err := g.AllReduce(context.Background(), pg.Float32s(make([]float32, 8)), pg.Op(pg.Sum)).Wait(context.Background())
	var ce *pg.CollectiveError
	if !errors.Is(err, pg.ErrTimeout) || !errors.As(err, &ce) || ce.Op != "allreduce" ||
		!strings.Contains(err.Error(), "#1") {
		t.Errorf("rank 0: %v, want pg.ErrTimeout naming allreduce #1", err)
	}
	// Later calls fail at once: the group is about to be aborted.
	if err := g.Barrier(context.Background()).Wait(context.Background()); !errors.Is(err, pg.ErrAborted) {
		t.Errorf("barrier after timeout: %v, want pg.ErrAborted", err)
	}
	if !t.Failed() {
		fmt.Println("TIMEOUT-OK", err)
	}
	time.Sleep(60 * time.Second)
}
