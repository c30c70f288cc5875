package sampler

import (
	"fmt"
	"math/rand/v2"
)

// Sampler gives one rank its share of a data set's indices, epoch by epoch.
// It holds no state that changes, so it is safe for concurrent use.
type Sampler struct {
	n, world, rank int
	shuffle        bool
	seed           int64
}

// New returns the sampler of rank among world ranks for a data set of n
// samples. It fails unless n ≥ 1, world ≥ 1 and 0 ≤ rank < world.
func New(n, world, rank int, shuffle bool, seed int64) (*Sampler, error) {
	switch {
	case n < 1:
		return nil, fmt.Errorf("sampler: the data set has %d samples; it needs at least one", n)
	case world < 1:
		return nil, fmt.Errorf("sampler: world size is %d; it must be at least 1", world)
	case rank < 0 || rank >= world:
		return nil, fmt.Errorf("sampler: rank %d is outside [0, %d), the ranks of a world of %d", rank, world, world)
	}
	return &Sampler{n: n, world: world, rank: rank, shuffle: shuffle, seed: seed}, nil
}

// NumSamples returns how many indices each rank gets per epoch:
// ceil(n/world).
func (s *Sampler) NumSamples() int {
	return (s.n + s.world - 1) / s.world
}

// Indices returns this rank's indices for epoch, in the order to use them.
// Each call returns a new slice.
func (s *Sampler) Indices(epoch int) []int {
	order := s.order(epoch)
	out := make([]int, s.NumSamples())
	for j := range out {
		// Position rank + j·world of the list padded by wrapping around.
		out[j] = order[(s.rank+j*s.world)%s.n]
	}
	return out
}

// order returns the epoch's index list before padding: 0..n-1, or its
// permutation seeded by (seed, epoch).
func (s *Sampler) order(epoch int) []int {
	if s.shuffle {
		return rand.New(rand.NewPCG(uint64(s.seed), uint64(epoch))).Perm(s.n)
	}
	order := make([]int, s.n)
	for i := range order {
		order[i] = i
	}
	return order
}

// Batches cuts indices into consecutive batches of batchSize; the last
// batch holds what is left and may be shorter. The batches share indices'
// memory. batchSize must be positive; callers validate it (Batches returns
// nil otherwise).
func Batches(indices []int, batchSize int) [][]int {
	if batchSize < 1 {
		return nil
	}
	batches := make([][]int, 0, StepsPerEpoch(len(indices), batchSize))
	for len(indices) > 0 {
		k := min(batchSize, len(indices))
		batches = append(batches, indices[:k:k])
		indices = indices[k:]
	}
	return batches
}

// StepsPerEpoch returns the number of batches of batchSize in numSamples
// indices: ceil(numSamples/batchSize). It returns 0 if batchSize < 1.
func StepsPerEpoch(numSamples, batchSize int) int {
	if batchSize < 1 {
		return 0
	}
	return (numSamples + batchSize - 1) / batchSize
}
