package main

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/ddp/launch"
)

// Jobs started the ways Kubernetes starts them, one process per pod, with
// only the variables the controller injects (and GODDP_SECRET from a
// Secret): Kubeflow Trainer v2's PET_ variables, and an Indexed Job's
// (or a JobSet's) JOB_COMPLETION_INDEX with WORLD_SIZE from the pod
// template. Both ranks train one job and end equal.
func TestKubernetesJobs(t *testing.T) {
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		vars func(rank int, port string) []string
	}{
		{"trainjob", func(rank int, port string) []string {
			return []string{"PET_NNODES=2", "PET_NPROC_PER_NODE=1", "PET_NODE_RANK=" + strconv.Itoa(rank),
				"PET_MASTER_ADDR=127.0.0.1", "PET_MASTER_PORT=" + port}
		}},
		{"indexed-job", func(rank int, port string) []string {
			return []string{"JOB_COMPLETION_INDEX=" + strconv.Itoa(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
				"MASTER_PORT=" + port}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := launch.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			results := make([]result, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				e := cleanEnv(append(tc.vars(r, strconv.Itoa(p)), "GODDP_SECRET="+secret)...)
				wg.Go(func() { results[r] = runWithEnv(t, e, args("--steps", "5")...) })
			}
			wg.Wait()
			var all string
			for r, res := range results {
				if res.code != 0 {
					t.Fatalf("pod %d exited %d:\n%s", r, res.code, res.stderr)
				}
				all += res.stderr
			}
			if d := digests(all); len(d) != 2 || d["0"] != d["1"] {
				t.Fatalf("digests %v, want two ranks, equal:\n%s", d, all)
			}
			if !strings.Contains(all, `"world_size":2`) {
				t.Fatalf("the pods did not form one 2-rank job:\n%s", all)
			}
		})
	}
}
