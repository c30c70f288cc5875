package main

import (
	"regexp"
	"testing"
)

var goodbyeRE = regexp.MustCompile(`(?m)^\[rank (\d+)\].*(closed its process group|closed their process groups)`)

// At the end of a six-worker job each rank logs at most one line for the
// peers that closed before it, not one per peer (Note [one goodbye line]
// in pg/tcp).
func TestShutdownOneGoodbyeLinePerRank(t *testing.T) {
	r := ddpTrain(t, "--nproc", "6", "--steps", "3", "--hidden", "16", "--samples", "512", "--batch-size", "16",
		"--timeout", "30s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	per := map[string]int{}
	for _, m := range goodbyeRE.FindAllStringSubmatch(r.stderr, -1) {
		per[m[1]]++
	}
	for rank, n := range per {
		if n > 1 {
			t.Errorf("rank %s logged %d goodbye lines, want at most one:\n%s", rank, n, r.stderr)
		}
	}
}
