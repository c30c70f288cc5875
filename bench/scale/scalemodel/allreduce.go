package scalemodel

import (
	"fmt"
	"math/bits"
)

// Algorithm is how an allreduce moves its data.
type Algorithm int

const (
	// Auto is what pg/tcp's AllReduce picks (pg/tcp/collectives.go):
	// Hierarchical when the group spans several hosts with several ranks
	// each and shared memory is on; else Doubling below RingThreshold
	// bytes and Ring from there.
	Auto Algorithm = iota
	// Ring is the pipelined ring (pg/tcp/ring.go): 2(p−1) rounds in which
	// every rank sends S/p bytes to its right neighbour.
	Ring
	// Doubling is recursive doubling (pg/tcp/doubling.go): lg p' rounds
	// in which every rank swaps all S bytes with rank XOR 2^k, plus a
	// fold-in and a hand-back round when p is not a power of two.
	Doubling
	// Hierarchical is Horovod's (commhook.Hierarchical, and
	// pg/tcp/shm_hier.go): a binomial reduce to each host's lowest rank,
	// an allreduce between those leaders (ring or doubling, as Auto picks
	// by size), and a binomial broadcast back.
	Hierarchical
)

// RingThreshold is pg/tcp's DefaultRingThreshold: allreduces of fewer
// bytes use recursive doubling.
const RingThreshold = 256 << 10

// String is the algorithm's name, as ParseAlgorithm reads it.
func (a Algorithm) String() string {
	switch a {
	case Auto:
		return "auto"
	case Ring:
		return "ring"
	case Doubling:
		return "doubling"
	case Hierarchical:
		return "hierarchical"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm reads an Algorithm's name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range []Algorithm{Auto, Ring, Doubling, Hierarchical} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("model: no algorithm %q; want auto, ring, doubling or hierarchical", s)
}

// AllReduceTime is the time, in seconds, of one allreduce of bytes bytes
// among every rank of c with algorithm a.
func (c Cluster) AllReduceTime(a Algorithm, bytes float64) float64 {
	p := c.Ranks()
	if p == 1 || bytes <= 0 {
		return 0
	}
	all := make([]int, p)
	for i := range all {
		all[i] = i
	}
	switch c.resolve(a, bytes) {
	case Ring:
		return c.ringTime(all, bytes)
	case Doubling:
		return c.doublingTime(all, bytes)
	}
	return c.hierTime(bytes)
}

// resolve turns Auto into the algorithm pg/tcp runs for bytes; with one
// rank per host, or one host, Hierarchical is the plain choice.
func (c Cluster) resolve(a Algorithm, bytes float64) Algorithm {
	multi := c.Hosts > 1 && c.RanksPerHost > 1
	switch {
	case a == Hierarchical && multi, a == Auto && multi && c.SharedMemory:
		return Hierarchical
	case a == Ring || a == Doubling:
		return a
	case bytes < RingThreshold:
		return Doubling
	}
	return Ring
}

// ringTime is the ring among ranks (in ring order): 2(n−1) rounds of
// S/n bytes from each to the next.
func (c Cluster) ringTime(ranks []int, bytes float64) float64 {
	n := len(ranks)
	if n < 2 {
		return 0
	}
	flows := make([]flow, n)
	for i, r := range ranks {
		flows[i] = flow{r, ranks[(i+1)%n], bytes / float64(n)}
	}
	return float64(2*(n-1)) * c.roundTime(flows)
}

// doublingTime is recursive doubling among ranks.
func (c Cluster) doublingTime(ranks []int, bytes float64) float64 {
	n := len(ranks)
	if n < 2 {
		return 0
	}
	pow := 1 << (bits.Len(uint(n)) - 1)
	var t float64
	if n > pow { // fold in, and later hand back: one round each
		var fold []flow
		for i := pow; i < n; i++ {
			fold = append(fold, flow{ranks[i], ranks[i-pow], bytes})
		}
		t += 2 * c.roundTime(fold)
	}
	flows := make([]flow, pow)
	for m := 1; m < pow; m <<= 1 {
		for i := range pow {
			flows[i] = flow{ranks[i], ranks[i^m], bytes}
		}
		t += c.roundTime(flows)
	}
	return t
}

// binomialTime is a binomial-tree reduce into ranks[0] (or, the same
// cost, a broadcast from it): ⌈lg n⌉ rounds of whole buffers.
func (c Cluster) binomialTime(ranks []int, bytes float64) float64 {
	var t float64
	for m := 1; m < len(ranks); m <<= 1 {
		var flows []flow
		for v := m; v < len(ranks); v += 2 * m {
			flows = append(flows, flow{ranks[v], ranks[v-m], bytes})
		}
		t += c.roundTime(flows)
	}
	return t
}

// hierTime is the hierarchical allreduce: reduce to each host's leader,
// allreduce between the leaders, broadcast back.
func (c Cluster) hierTime(bytes float64) float64 {
	local := make([]int, c.RanksPerHost) // host 0's ranks; every host's cost the same
	for i := range local {
		local[i] = i
	}
	leaders := make([]int, c.Hosts)
	for h := range leaders {
		leaders[h] = h * c.RanksPerHost
	}
	var cross float64
	if bytes < RingThreshold {
		cross = c.doublingTime(leaders, bytes)
	} else {
		cross = c.ringTime(leaders, bytes)
	}
	return 2*c.binomialTime(local, bytes) + cross
}
