//go:build mpi

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMPIMatchesTCPBitwise trains the same job twice, with --backend tcp
// --nproc 2 and under mpirun -np 2 with --backend mpi, and wants every
// saved parameter file byte for byte the same.
func TestMPIMatchesTCPBitwise(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	dir := t.TempDir()
	common := args("--steps", "20", "--optimizer", "adam", "--lr", "0.01", "--seed", "7")
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
