package optim

import (
	"fmt"
	"slices"
)

// Partition assigns every parameter to the rank that will hold its
// optimizer state and step it, as torch 1.13's ZeroRedundancyOptimizer
// partitions parameters (ZeRO stage 1). groups[g][i] is the number of
// elements of parameter i of parameter group g; the result has the same
// shape and holds each parameter's owner rank, in [0, world).
//
// The algorithm is torch's: one running total of elements per rank,
// carried across the groups; within a group, the parameters largest
// first (a stable sort, so equal sizes keep their order in the group),
// each given to the rank with the smallest running total, the lowest
// such rank on ties. Every rank computes the same partition from the same
// sizes, so no communication is needed to agree on it.
func Partition(groups [][]int, world int) ([][]int, error) {
	if world < 1 {
		return nil, fmt.Errorf("optim: Partition: world size %d; want at least 1", world)
	}
	totals := make([]int, world)
	owners := make([][]int, len(groups))
	for g, sizes := range groups {
		order := make([]int, len(sizes))
		for i, n := range sizes {
			if n < 0 {
				return nil, fmt.Errorf("optim: Partition: parameter %d of group %d has %d elements", i, g, n)
			}
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return sizes[b] - sizes[a] })
		owners[g] = make([]int, len(sizes))
		for _, i := range order {
			r := slices.Index(totals, slices.Min(totals))
			owners[g][i] = r
			totals[r] += sizes[i]
		}
	}
	return owners, nil
}
