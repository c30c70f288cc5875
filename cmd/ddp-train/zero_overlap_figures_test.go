package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestZeroOverlapFigures measures, for docs/optimizers.md, the training
// throughput of Adam without ZeRO, with --zero, and with --zero-overlap
// (interleaved, deferred, and interleaved with --zero-reduce-to-owners),
// over tcp between real processes: GODDP_ZERO_OVERLAP_RANKS ranks
// (default 2), --hidden GODDP_ZERO_OVERLAP_HIDDEN (default 1024,1024,1024),
// the modes interleaved round by round (GODDP_ZERO_OVERLAP_ROUNDS, default
// 3) so that the machine's noise falls on all of them, each figure a ratio
// to the run without ZeRO of the same round; GODDP_ZERO_OVERLAP_EXTRA adds
// flags to every run (for example --shm=false). It runs only with
// GODDP_ZERO_OVERLAP_FIGURES=1: it is a measurement, not a check.
func TestZeroOverlapFigures(t *testing.T) {
	if os.Getenv("GODDP_ZERO_OVERLAP_FIGURES") != "1" {
		t.Skip("a measurement: set GODDP_ZERO_OVERLAP_FIGURES=1")
	}
	ranks := cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_RANKS"), "2")
	hidden := cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_HIDDEN"), "1024,1024,1024")
	rounds, _ := strconv.Atoi(cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_ROUNDS"), "3"))
	modes := []struct {
		name  string
		flags []string
	}{
		{"no ZeRO", nil},
		{"--zero", []string{"--zero"}},
		{"--zero-overlap interleaved", []string{"--zero", "--zero-overlap", "interleaved"}},
		{"--zero-overlap deferred", []string{"--zero", "--zero-overlap", "deferred"}},
		{"interleaved --zero-reduce-to-owners", []string{"--zero", "--zero-overlap", "interleaved",
			"--zero-reduce-to-owners"}},
	}
	dir := t.TempDir()
	rates := make([][]float64, len(modes))
	ratios := make([][]float64, len(modes))
	for round := range rounds {
		var base float64
		for i, m := range modes {
			sum := filepath.Join(dir, fmt.Sprintf("%d-%d.json", round, i))
			args := slices.Concat([]string{"--backend", "tcp", "--nproc", ranks, "--hidden", hidden, "--optimizer",
				"adam", "--steps", "80", "--batch-size", "32", "--samples", "4096", "--log-format", "json",
				"--timeout", "120s", "--summary", sum}, strings.Fields(os.Getenv("GODDP_ZERO_OVERLAP_EXTRA")), m.flags)
			if r := ddpTrain(t, args...); r.code != 0 {
				t.Fatalf("%s: exit %d\n%s", m.name, r.code, r.stderr)
			}
			s := readSummary(t, sum)
			if i == 0 {
				base = s.SamplesPerSec
			}
			rates[i] = append(rates[i], s.SamplesPerSec)
			ratios[i] = append(ratios[i], s.SamplesPerSec/base)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| %d ranks, --hidden %s, Adam %s| samples/s (median) | throughput / no ZeRO (median) |\n",
		mustAtoi(ranks), hidden, os.Getenv("GODDP_ZERO_OVERLAP_EXTRA")+" ")
	b.WriteString("|---|---|---|\n")
	for i, m := range modes {
		fmt.Fprintf(&b, "| %s | %.0f | %.3f |\n", m.name, median(rates[i]), median(ratios[i]))
	}
	t.Log(b.String())
}

func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	return s[len(s)/2]
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
