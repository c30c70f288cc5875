package main

import (
	"cmp"
	"os"
	"strconv"
	"testing"
)

// TestZeroMemoryTable measures, for docs/optimizers.md, the peak RSS of
// the tcp workers and rank 0's optimizer state with Adam at 1 to 4 ranks,
// with and without --zero, on an MLP (--hidden GODDP_ZERO_MEMORY_HIDDEN,
// default 2048,2048,2048: 12.6M float32 parameters). It
// runs only with GODDP_ZERO_MEMORY_TABLE=1: it is a measurement, not a
// check.
func TestZeroMemoryTable(t *testing.T) {
	if os.Getenv("GODDP_ZERO_MEMORY_TABLE") != "1" {
		t.Skip("a measurement: set GODDP_ZERO_MEMORY_TABLE=1")
	}
	dir, hidden := t.TempDir(), cmp.Or(os.Getenv("GODDP_ZERO_MEMORY_HIDDEN"), "2048,2048,2048")
	for _, n := range []int{1, 2, 3, 4} {
		for _, zero := range []bool{false, true} {
			sum := dir + "/s.json"
			flags := []string{"--backend", "tcp", "--nproc", strconv.Itoa(n), "--samples", "512", "--hidden",
				hidden, "--optimizer", "adam", "--steps", "3", "--batch-size", "16", "--log-format", "json",
				"--timeout", "120s", "--summary", sum}
			if zero {
				flags = append(flags, "--zero")
			}
			_, worker, _ := peaks(t, flags...)
			t.Logf("ranks %d zero %v: worker peak RSS %.1f MiB, rank 0 optimizer state %.1f MiB", n, zero,
				float64(worker)/(1<<20), float64(summaryStateBytes(t, sum))/(1<<20))
		}
	}
}
