package sampler_test

import (
	"fmt"

	"github.com/goddp/ddp/sampler"
)

// Ten samples over three ranks, as torch's DistributedSampler splits them:
// the list is padded to 12 with 0 and 1, and rank r takes every third.
func Example() {
	for rank := range 3 {
		s, err := sampler.New(10, 3, rank, false, 0)
		if err != nil {
			fmt.Println(err)
			return
		}
		idx := s.Indices(0)
		fmt.Println("rank", rank, idx, "batches of 3:", sampler.Batches(idx, 3), sampler.StepsPerEpoch(s.NumSamples(), 3))
	}
	// Output:
	// rank 0 [0 3 6 9] batches of 3: [[0 3 6] [9]] 2
	// rank 1 [1 4 7 0] batches of 3: [[1 4 7] [0]] 2
	// rank 2 [2 5 8 1] batches of 3: [[2 5 8] [1]] 2
}

// With shuffling, each epoch has its own permutation, the same on every
// rank and in every run.
func Example_shuffle() {
	s, _ := sampler.New(10, 2, 0, true, 1)
	fmt.Println(s.Indices(0), s.Indices(1))
	// Output:
	// [6 1 7 8 0] [3 8 7 6 0]
}
