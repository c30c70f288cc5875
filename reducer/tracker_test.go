package reducer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// permutations calls f with every ordering of 0..n-1.
func permutations(n int, f func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			f(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// randomPlan splits a random permutation of n parameters into buckets.
func randomPlan(rng *rand.Rand, n int) [][]int {
	perm := rng.Perm(n)
	var plan [][]int
	for len(perm) > 0 {
		k := 1 + rng.IntN(len(perm))
		plan = append(plan, perm[:k])
		perm = perm[k:]
	}
	return plan
}

// Every ready order, for many plans: buckets launch exactly once, in index
// order, and only once they and every earlier bucket are complete.
func TestTrackerLaunchesInOrderForEveryReadyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 40 {
		n := 1 + rng.IntN(6)
		plan := randomPlan(rng, n)
		tr := newTracker(plan, n)
		permutations(n, func(order []int) {
			tr.reset()
			ready := map[int]bool{}
			launched := 0
			for _, p := range order {
				ready[p] = true
				from, to, ok := tr.markReady(p)
				if !ok {
					t.Fatalf("trial %d: parameter %d refused on its first mark", trial, p)
				}
				if from != launched {
					t.Fatalf("trial %d order %v: launch from %d, want %d", trial, order, from, launched)
				}
				for b := from; b < to; b++ {
					for _, q := range plan[b] {
						if !ready[q] {
							t.Fatalf("trial %d order %v: bucket %d launched before parameter %d was ready", trial, order, b, q)
						}
					}
				}
				launched = to
				// The next bucket must not be complete, or it would have launched.
				if launched < len(plan) && !slices.ContainsFunc(plan[launched], func(q int) bool { return !ready[q] }) {
					t.Fatalf("trial %d order %v: bucket %d complete but not launched", trial, order, launched)
				}
			}
			if !tr.allLaunched() || launched != len(plan) {
				t.Fatalf("trial %d order %v: %d of %d buckets launched", trial, order, launched, len(plan))
			}
			if _, _, ok := tr.markReady(order[0]); ok {
				t.Fatalf("trial %d: a second mark of %d was accepted", trial, order[0])
			}
		})
	}
}

func TestTrackerMissing(t *testing.T) {
	tr := newTracker([][]int{{2, 0}, {1, 3}}, 4)
	tr.markReady(3)
	tr.markReady(0)
	if got := tr.missing(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("missing = %v, want [1 2]", got)
	}
	if tr.allLaunched() {
		t.Fatal("allLaunched with parameters missing")
	}
}
