package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Note [absurd labels] (package dataset): one stray label of 1000000
// among four classes is refused up front, naming it, instead of a model
// of a million classes in every process.
func TestStrayLabelRefused(t *testing.T) {
	dir := t.TempDir()
	x, y := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	const n = 64
	labels := make([]int64, n)
	for i := range labels {
		labels[i] = int64(i % 4)
	}
	labels[7] = 1000000
	writeNPY(t, x, []int{n, 4}, make([]float64, 4*n))
	writeNPY(t, y, []int{n}, labels)
	r := ddpTrain(t, args("--data", x, "--labels", y)...)
	if r.code != 2 || !strings.Contains(r.stderr, "label 1000000 (index 7) is far beyond") ||
		!strings.Contains(r.stderr, "--classes 1000001") || strings.Contains(r.stderr, "worker") {
		t.Fatalf("exit %d, want 2 from the launcher naming the label, its index and --classes\n%s", r.code, r.stderr)
	}
}
