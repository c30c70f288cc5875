//go:build mpi

package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMPIEngineGoMLX trains with --engine gomlx under mpirun -np N with
// --backend mpi, and the same job with --backend tcp --nproc N (shared
// memory, ddp-train's default on one host), and compares them. With two
// ranks, for SGD and Adam, every rank of both jobs must end with bitwise
// the same parameters (the "done" lines' param_digest) and the same
// "train" lines: each element of the allreduce is one addition, a+b, the
// same bits in any order (MPI's, goddp's ring or shared memory), and
// everything else (the data, the GoMLX program, the division by the
// world size, the optimizer) is the same code on the same inputs; so is
// the case with --dropout (each rank's masks), AdamW and a cosine
// schedule. With three ranks the
// sum a+b+c may be added in another order by Open MPI's algorithm (its
// tuned rules pick one by size and message length) than by goddp's, so
// only the MPI ranks' digests must agree with each other, and the loss
// curves within 1e-9; whether the parameters are bitwise equal too is
// logged.
func TestMPIEngineGoMLX(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opt     string
		n       int
		bitwise bool
		extra   []string
	}{{"sgd", 2, true, nil}, {"adam", 2, true, nil}, {"adam", 3, false, nil},
		{"adamw", 2, true, []string{"--dropout", "0.2", "--lr-schedule", "cosine"}}} {
		t.Run(fmt.Sprintf("%s/%d", c.opt, c.n), func(t *testing.T) {
			np := strconv.Itoa(c.n)
			common := args(append([]string{"--engine", "gomlx", "--steps", "12", "--log-every", "3", "--dtype", "float64",
				"--optimizer", c.opt, "--lr", cmp.Or(map[string]string{"sgd": "0.1"}[c.opt], "0.01"), "--seed", "7"},
				c.extra...)...)
			ref := ddpTrain(t, append(common, "--backend", "tcp", "--nproc", np)...)
			if ref.code != 0 {
				t.Fatalf("tcp: exit %d\n%s", ref.code, ref.stderr)
			}
			want := digests(ref.stderr)
			if !sameDigests(want, c.n) || strings.Count(ref.stderr, `"engine":"gomlx"`) < c.n {
				t.Fatalf("tcp: digests %v, want %d, equal, from --engine gomlx\n%s", want, c.n, ref.stderr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, mpirun, append([]string{"--allow-run-as-root", "--oversubscribe", "-np", np, self},
				append(common, "--backend", "mpi")...)...)
			cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("mpirun -np %d ddp-train --engine gomlx --backend mpi: %v\n%s", c.n, err, stderr.String())
			}
			log := stderr.String()
			if n := strings.Count(log, `"msg":"mpi process group"`); n != c.n {
				t.Fatalf("%d ranks joined an MPI process group, want %d\n%s", n, c.n, log)
			}
			if n := strings.Count(log, `"msg":"done"`); n != c.n || strings.Count(log, `"engine":"gomlx"`) < c.n {
				t.Fatalf("want %d \"done\" lines from --engine gomlx\n%s", c.n, log)
			}
			got := digests(log)
			if !sameDigests(got, c.n) {
				t.Fatalf("--backend mpi: the ranks' digests differ: %v\n%s", got, log)
			}
			bitwise := got["0"] == want["0"]
			if c.bitwise && !bitwise {
				t.Fatalf("--backend mpi: digest %s; --backend tcp: %s\n%s", got["0"], want["0"], log)
			}
			wantCurve, gotCurve := trainLosses(t, ref.stderr), trainLosses(t, log)
			if len(wantCurve) != 4 || len(gotCurve) != 4 {
				t.Fatalf("train losses %v over mpi, %v over tcp: want 4 each", gotCurve, wantCurve)
			}
			for i := range wantCurve {
				if d := math.Abs(gotCurve[i] - wantCurve[i]); (c.bitwise && d != 0) || !(d <= 1e-9*max(1, math.Abs(wantCurve[i]))) {
					t.Fatalf("train losses %v over mpi, %v over tcp", gotCurve, wantCurve)
				}
			}
			t.Logf("mpi and tcp: parameters bitwise equal: %v (digests %s, %s), losses %v", bitwise, got["0"], want["0"],
				wantCurve)
		})
	}
}
