//go:build mpi

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/desync"
	"github.com/goddp/ddp/pg/flight"
)

// TestMPIMatchesTCPBitwise trains the same job twice, with --backend tcp
// --nproc 2 and under mpirun -np 2 with --backend mpi, and wants every
// saved parameter file byte for byte the same: DDP, Streaming DiLoCo
// (whose outer steps are MPI allreduces of pseudo-gradients), and ZeRO's
// overlap (its broadcasts on an MPI subgroup; with 2 ranks a reduce to
// the owner adds the same two numbers an allreduce does).
func TestMPIMatchesTCPBitwise(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"ddp", nil},
		{"diloco", []string{"--diloco-sync-every", "6", "--diloco-fragments", "2", "--diloco-delay", "1"}},
		{"diloco-int8", []string{"--diloco-sync-every", "6", "--diloco-fragments", "2", "--diloco-delay", "1",
			"--diloco-quantize", "int8"}},
		{"zero-overlap", []string{"--zero", "--zero-overlap", "interleaved", "--bucket-cap-mb", "0.01",
			"--first-bucket-mb", "0.01"}},
		{"zero-reduce-to-owners", []string{"--zero", "--zero-overlap", "deferred", "--zero-reduce-to-owners"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			common := append(args("--steps", "20", "--optimizer", "adam", "--lr", "0.01", "--seed", "7"), c.extra...)
			mpiMatchesTCP(t, mpirun, common)
		})
	}
}

// mpiMatchesTCP is one case of TestMPIMatchesTCPBitwise.
func mpiMatchesTCP(t *testing.T, mpirun string, common []string) {
	dir := t.TempDir()
	tcpDir, mpiDir := filepath.Join(dir, "tcp"), filepath.Join(dir, "mpi")
	if r := ddpTrain(t, append(common, "--backend", "tcp", "--nproc", "2", "--save", tcpDir)...); r.code != 0 {
		t.Fatalf("tcp: exit %d\n%s", r.code, r.stderr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", self},
		append(common, "--backend", "mpi", "--save", mpiDir)...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun -np 2 ddp-train --backend mpi: %v\n%s", err, stderr.String())
	}
	if n := bytes.Count(stderr.Bytes(), []byte(`"msg":"mpi process group"`)); n != 2 {
		t.Fatalf("%d ranks joined an MPI process group, want 2\n%s", n, stderr.String())
	}
	if d := digests(stderr.String()); len(d) != 2 || d["0"] != d["1"] {
		t.Fatalf("mpi ranks' digests %v\n%s", d, stderr.String())
	}
	files, err := filepath.Glob(filepath.Join(tcpDir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("tcp saved nothing in %s: %v", tcpDir, err)
	}
	for _, f := range files {
		a, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(mpiDir, filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between --backend tcp and --backend mpi", filepath.Base(f))
		}
	}
	t.Logf("%d parameter files bitwise equal", len(files))
}

// TestMPICulprit: under mpirun -np 3 with --backend mpi, a rank stopped
// (SIGSTOP) or killed mid-run is named first, and the job ends within
// --timeout plus a few seconds. A stopped rank is named by the survivors
// (pg/desync over the store rank 0 hosts for the MPI job, then
// MPI_Abort); a killed one by mpirun itself, which ends the job at once.
func TestMPICulprit(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	if testing.Short() {
		t.Skip("starts 3 MPI ranks per trial and waits out a timeout")
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		for _, victim := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/rank%d", sig, victim), func(t *testing.T) {
				flightDir := filepath.Join(t.TempDir(), "flight")
				headline, took := mpiCulpritRun(t, mpirun, victim, sig, "--flight-dir", flightDir)
				t.Logf("%.1fs after the signal: %s", took.Seconds(), headline)
				want := fmt.Sprintf(
					`^(ddp-train: rank \d+: .*pg: rank %d did not answer|mpirun noticed that process rank %d .*exited on signal)`,
					victim, victim)
				if !regexp.MustCompile(want).MatchString(headline) {
					t.Errorf("the first line does not name rank %d (want %s):\n%s", victim, want, headline)
				}
				if limit := culpritTimeout + desync.DefaultDiagnosisTimeout + 4*time.Second; took > limit {
					t.Errorf("the job ended %v after the signal; want within %v", took, limit)
				}
				if sig == syscall.SIGSTOP { // the survivors dump their flight recorders on the failure
					for r := range 3 {
						if _, err := os.Stat(filepath.Join(flightDir, flight.DefaultPrefix+strconv.Itoa(r))); r != victim && err != nil {
							t.Errorf("rank %d left no flight recorder dump: %v", r, err)
						}
					}
				}
			})
		}
	}
}

// mpiCulpritRun runs ddp-train --backend mpi under mpirun -np 3, sends
// sig to rank victim once every rank trains, and returns the first line
// that names a failure (ours, or mpirun's) and how long after the signal
// mpirun ended.
func mpiCulpritRun(t *testing.T, mpirun string, victim int, sig syscall.Signal, extra ...string) (string,
	time.Duration) {
	self, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "3", self},
		args(append([]string{"--backend", "mpi", "--steps", "1000000", "--timeout", culpritTimeout.String(), "--log-every",
			"1000000"}, extra...)...)...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errOut lockedBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := waitForMPIRank(t, &errOut, victim)
	defer func() {
		syscall.Kill(pid, syscall.SIGCONT)
		syscall.Kill(pid, syscall.SIGKILL)
	}()
	time.Sleep(time.Second) // let training run
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Wait(); err == nil {
		t.Fatalf("mpirun exited 0 after rank %d got %v", victim, sig)
	}
	took := time.Since(start)
	line := regexp.MustCompile(`(?m)^(ddp-train: |mpirun noticed that process rank ).*$`).FindString(errOut.String())
	if line == "" {
		t.Fatalf("no line names a failure:\n%s", errOut.String())
	}
	return line, took
}

// waitForMPIRank waits until all 3 ranks have built their buckets and
// returns the pid of the process whose OMPI_COMM_WORLD_RANK is rank.
func waitForMPIRank(t *testing.T, errOut *lockedBuffer, rank int) int {
	t.Helper()
	want := []byte("\x00OMPI_COMM_WORLD_RANK=" + strconv.Itoa(rank) + "\x00")
	self, _ := os.Executable()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Count(errOut.String(), "Reducer buckets have been rebuilt") < 3 {
			continue
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/environ")
		for _, p := range procs {
			env, err := os.ReadFile(p)
			exe, _ := os.Readlink(filepath.Join(filepath.Dir(p), "exe"))
			if err == nil && exe == self && bytes.Contains(append([]byte{0}, env...), want) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
	}
	t.Fatalf("rank %d never started training:\n%s", rank, errOut.String())
	return 0
}
