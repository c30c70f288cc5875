package sampler

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// torchIndices transcribes DistributedSampler.__iter__ (drop_last=False)
// for a given index list.
func torchIndices(indices []int, world, rank int) []int {
	n := len(indices)
	numSamples := (n + world - 1) / world
	total := numSamples * world
	indices = slices.Clone(indices)
	if pad := total - n; pad <= n {
		indices = append(indices, indices[:pad]...)
	} else {
		var rep []int
		for range (pad + n - 1) / n {
			rep = append(rep, indices...)
		}
		indices = append(indices, rep[:pad]...)
	}
	var out []int
	for i := rank; i < total; i += world {
		out = append(out, indices[i])
	}
	return out
}

func mustNew(t *testing.T, n, world, rank int, shuffle bool, seed int64) *Sampler {
	t.Helper()
	s, err := New(n, world, rank, shuffle, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTorchExamples(t *testing.T) {
	for _, c := range []struct {
		n, world int
		want     [][]int
	}{
		{10, 3, [][]int{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}},
		{2, 5, [][]int{{0}, {1}, {0}, {1}, {0}}},
		{3, 8, [][]int{{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}}},
		{1, 3, [][]int{{0}, {0}, {0}}},
		{4, 2, [][]int{{0, 2}, {1, 3}}},
		{5, 1, [][]int{{0, 1, 2, 3, 4}}},
		{7, 7, [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}}},
	} {
		for r, want := range c.want {
			s := mustNew(t, c.n, c.world, r, false, 0)
			if got := s.Indices(0); !slices.Equal(got, want) || s.NumSamples() != len(want) {
				t.Errorf("N=%d world=%d rank %d: got %v (NumSamples %d), want %v", c.n, c.world, r, got, s.NumSamples(), want)
			}
		}
	}
}

// Against the transcription of torch, for many sizes, with and without
// shuffling; and the properties that follow.
func TestMatchesTorch(t *testing.T) {
	for n := 1; n <= 13; n++ {
		for world := 1; world <= 2*n+3; world++ {
			for _, shuffle := range []bool{false, true} {
				checkSizes(t, n, world, shuffle)
			}
		}
	}
}

func checkSizes(t *testing.T, n, world int, shuffle bool) {
	t.Helper()
	const epoch = 5
	var seed int64 = -3
	base := make([]int, n)
	for i := range base {
		base[i] = i
	}
	if shuffle {
		base = rand.New(rand.NewPCG(uint64(seed), epoch)).Perm(n)
	}
	counts := make([]int, n) // over all positions, padding included
	firstN := make([]int, n) // over the first n positions, before padding
	for r := range world {
		got := mustNew(t, n, world, r, shuffle, seed).Indices(epoch)
		if want := torchIndices(base, world, r); !slices.Equal(got, want) {
			t.Fatalf("N=%d world=%d rank %d shuffle=%v: got %v, want torch's %v", n, world, r, shuffle, got, want)
		}
		for j, i := range got {
			counts[i]++
			if r+j*world < n {
				firstN[i]++
			}
		}
	}
	for i := range n {
		if counts[i] == 0 || firstN[i] != 1 {
			t.Fatalf("N=%d world=%d shuffle=%v: index %d appears %d times, %d before padding; want ≥1 and exactly 1", n, world,
				shuffle, i, counts[i], firstN[i])
		}
	}
}

func TestShuffle(t *testing.T) {
	a := mustNew(t, 100, 2, 1, true, 42)
	b := mustNew(t, 100, 2, 1, true, 42)
	if !slices.Equal(a.Indices(3), b.Indices(3)) {
		t.Error("the same (seed, epoch) gave different indices")
	}
	if slices.Equal(a.Indices(0), a.Indices(1)) {
		t.Error("epochs 0 and 1 gave the same indices")
	}
	if c := mustNew(t, 100, 2, 1, true, 43); slices.Equal(a.Indices(0), c.Indices(0)) {
		t.Error("seeds 42 and 43 gave the same indices")
	}
	if plain := mustNew(t, 100, 2, 1, false, 42); slices.Equal(a.Indices(0), plain.Indices(0)) {
		t.Error("shuffling left the indices in order")
	}
	if s := mustNew(t, 100, 2, 1, false, 42); !slices.Equal(s.Indices(0), s.Indices(9)) {
		t.Error("without shuffling, epochs differ")
	}
}

func TestNewRejects(t *testing.T) {
	for _, c := range []struct {
		n, world, rank int
		want           string
	}{
		{0, 1, 0, "0 samples"},
		{5, 0, 0, "world size is 0"},
		{5, 2, 2, "rank 2 is outside [0, 2)"},
		{5, 2, -1, "rank -1"},
	} {
		if _, err := New(c.n, c.world, c.rank, false, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%d, %d, %d): got %v, want an error containing %q", c.n, c.world, c.rank, err, c.want)
		}
	}
}

func TestBatches(t *testing.T) {
	idx := []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}
	for _, c := range []struct {
		bs   int
		want [][]int
	}{
		{4, [][]int{{9, 8, 7, 6}, {5, 4, 3, 2}, {1, 0}}},
		{5, [][]int{{9, 8, 7, 6, 5}, {4, 3, 2, 1, 0}}},
		{1, [][]int{{9}, {8}, {7}, {6}, {5}, {4}, {3}, {2}, {1}, {0}}},
		{64, [][]int{idx}},
	} {
		got := Batches(idx, c.bs)
		if !slices.EqualFunc(got, c.want, slices.Equal) || len(got) != StepsPerEpoch(len(idx), c.bs) {
			t.Errorf("Batches(bs=%d) = %v, want %v", c.bs, got, c.want)
		}
	}
	b := Batches(slices.Clone(idx), 4)
	_ = append(b[0], -1) // must not overwrite b[1][0]
	if b[1][0] != 5 {
		t.Error("appending to a batch overwrote the next one")
	}
	if got := Batches(nil, 3); len(got) != 0 {
		t.Errorf("Batches(nil) = %v", got)
	}
	if Batches(idx, 0) != nil || StepsPerEpoch(10, 0) != 0 {
		t.Error("batch size 0 did not give nil and 0 steps")
	}
	for _, c := range [][3]int{{10, 4, 3}, {8, 4, 2}, {0, 4, 0}, {1, 100, 1}} {
		if got := StepsPerEpoch(c[0], c[1]); got != c[2] {
			t.Errorf("StepsPerEpoch(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
