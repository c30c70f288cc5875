package main

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
)

// TestDuplicateRankExits2: three workers started with RANK 0, 1 and 1 of
// WORLD_SIZE=3, as a launcher with a wrong rank table would. Every one
// exits 2 (bad input) within seconds, naming rank 1 and both processes
// that claimed it, instead of timing out.
func TestDuplicateRankExits2(t *testing.T) {
	job, err := launch.StandaloneEnv(3)
	if err != nil {
		t.Fatal(err)
	}
	ranks := []int{0, 1, 1}
	results := make([]result, len(ranks))
	took := make([]time.Duration, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		env := cleanEnv(append(job, "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r))...)
		wg.Go(func() {
			start := time.Now()
			results[i] = runWithEnv(t, env, args("--steps", "3")...)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 2 || !strings.Contains(r.stderr, "rank 1 is claimed by two processes") {
			t.Errorf("process %d (rank %d): exit %d after %v, want 2 and an error naming rank 1\nstderr:\n%s", i, ranks[i],
				r.code, took[i], r.stderr)
		}
		if took[i] > 15*time.Second {
			t.Errorf("process %d took %v", i, took[i])
		}
	}
}
