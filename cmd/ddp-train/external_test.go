package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/goddp/ddp/launch"
)

// Started by an external launcher, each process is one worker. This plays
// torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and mpirun
// (OMPI_COMM_WORLD_RANK and _SIZE) by hand.
func TestExternalLauncherConventions(t *testing.T) {
	for _, style := range []string{"torchrun", "mpirun"} {
		t.Run(style, func(t *testing.T) {
			port, err := launch.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			secret, _ := launch.NewSecret()
			self, _ := os.Executable()
			const n = 2
			results := make([]result, n)
			var wg sync.WaitGroup
			for r := range n {
				cmd := exec.Command(self, args("--steps", "5")...)
				cmd.Env = append(os.Environ(), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GODDP_SECRET="+secret)
				if style == "torchrun" {
					cmd.Env = append(cmd.Env, "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n))
				} else {
					cmd.Env = append(cmd.Env, "OMPI_COMM_WORLD_RANK="+strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE="+strconv.Itoa(n))
				}
				var out, errOut bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errOut
				wg.Go(func() {
					err := cmd.Run()
					code := 0
					if ee, ok := err.(*exec.ExitError); ok {
						code = ee.ExitCode()
					}
					results[r] = result{code, out.String(), errOut.String()}
				})
			}
			wg.Wait()
			var all string
			for r, res := range results {
				if res.code != 0 {
					t.Fatalf("rank %d exited %d:\n%s", r, res.code, res.stderr)
				}
				all += res.stderr
			}
			d := digests(all)
			if len(d) != n || d["0"] != d["1"] {
				t.Fatalf("digests %v", d)
			}
		})
	}
}
