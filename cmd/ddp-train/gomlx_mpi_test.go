//go:build mpi

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMPIEngineGoMLX trains with --engine gomlx under mpirun -np 2 with
// --backend mpi, and the same job with --backend tcp --nproc 2, for SGD
// and Adam, and wants both ranks of both jobs to end with bitwise the
// same parameters (the "done" lines' param_digest) and the same "train"
// lines. Bitwise, not within a tolerance: with two ranks each
// element of the allreduce is one addition, a+b, the same bits in any
// order (MPI's or goddp's ring or shared memory), and everything else
// (the data, the two GoMLX programs, the division by the world size) is
// the same code on the same inputs.
func TestMPIEngineGoMLX(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"sgd", "adam"} {
		t.Run(opt, func(t *testing.T) {
			common := args("--engine", "gomlx", "--steps", "12", "--log-every", "3", "--dtype", "float64",
				"--optimizer", opt, "--lr", map[string]string{"sgd": "0.1", "adam": "0.01"}[opt], "--seed", "7")
			ref := ddpTrain(t, append(common, "--backend", "tcp", "--nproc", "2")...)
			if ref.code != 0 {
				t.Fatalf("tcp: exit %d\n%s", ref.code, ref.stderr)
			}
			want := digests(ref.stderr)
			if len(want) != 2 || want["0"] != want["1"] || strings.Count(ref.stderr, `"engine":"gomlx"`) < 2 {
				t.Fatalf("tcp: digests %v, want two, equal, from --engine gomlx\n%s", want, ref.stderr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", self},
				append(common, "--backend", "mpi")...)...)
			cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("mpirun -np 2 ddp-train --engine gomlx --backend mpi: %v\n%s", err, stderr.String())
			}
			log := stderr.String()
			if n := strings.Count(log, `"msg":"mpi process group"`); n != 2 {
				t.Fatalf("%d ranks joined an MPI process group, want 2\n%s", n, log)
			}
			if n := strings.Count(log, `"msg":"done"`); n != 2 || strings.Count(log, `"engine":"gomlx"`) < 2 {
				t.Fatalf("want 2 \"done\" lines from --engine gomlx\n%s", log)
			}
			got := digests(log)
			if len(got) != 2 || got["0"] != want["0"] || got["1"] != want["0"] {
				t.Fatalf("--backend mpi: digests %v; --backend tcp: %s on both ranks\n%s", got, want["0"], log)
			}
			wantCurve, gotCurve := trainLosses(t, ref.stderr), trainLosses(t, log)
			if len(wantCurve) != 4 || !slices.Equal(gotCurve, wantCurve) {
				t.Fatalf("train losses %v over mpi, %v over tcp", gotCurve, wantCurve)
			}
			t.Logf("mpi and tcp: parameters bitwise equal (digest %s), losses %v", want["0"], wantCurve)
		})
	}
}
