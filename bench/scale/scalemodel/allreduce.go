package scalemodel

import (
	"fmt"
	"math/bits"
	"slices"
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
	var t float64
	for _, r := range c.rounds(a, bytes) {
		t += float64(r.times) * c.roundTime(r.flows)
	}
	return t
}

// Traffic is what one allreduce puts on the links.
type Traffic struct {
	// RankSent is the bytes a rank sends, over every link, averaged over
	// the ranks.
	RankSent float64
	// HostSent is the most bytes any host sends over its inter-host link:
	// what a host's network interface counts (tx bytes), payload only.
	HostSent float64
}

// AllReduceTraffic is the bytes one allreduce of bytes bytes among every
// rank of c with algorithm a sends: per rank, and per host between hosts.
func (c Cluster) AllReduceTraffic(a Algorithm, bytes float64) Traffic {
	out := make(map[int]float64) // per host, to other hosts
	var all float64
	for _, r := range c.rounds(a, bytes) {
		for _, f := range r.flows {
			all += float64(r.times) * f.bytes
			if f.from/c.RanksPerHost != f.to/c.RanksPerHost {
				out[f.from/c.RanksPerHost] += float64(r.times) * f.bytes
			}
		}
	}
	tr := Traffic{RankSent: all / float64(c.Ranks())}
	for _, b := range out {
		tr.HostSent = max(tr.HostSent, b)
	}
	return tr
}

// round is a set of flows that run at once, repeated times times in a
// row (the ring's 2(p−1) alike rounds are one round repeated).
type round struct {
	flows []flow
	times int
}

// rounds are the rounds one allreduce of bytes among every rank of c
// runs with algorithm a; none with one rank or no bytes.
func (c Cluster) rounds(a Algorithm, bytes float64) []round {
	p := c.Ranks()
	if p == 1 || bytes <= 0 {
		return nil
	}
	all := make([]int, p)
	for i := range all {
		all[i] = i
	}
	switch c.resolve(a, bytes) {
	case Ring:
		return ringRounds(all, bytes)
	case Doubling:
		return doublingRounds(all, bytes)
	}
	return c.hierRounds(bytes)
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

// ringRounds is the ring among ranks (in ring order): 2(n−1) rounds of
// S/n bytes from each to the next.
func ringRounds(ranks []int, bytes float64) []round {
	n := len(ranks)
	if n < 2 {
		return nil
	}
	flows := make([]flow, n)
	for i, r := range ranks {
		flows[i] = flow{r, ranks[(i+1)%n], bytes / float64(n)}
	}
	return []round{{flows, 2 * (n - 1)}}
}

// doublingRounds is recursive doubling among ranks.
func doublingRounds(ranks []int, bytes float64) []round {
	n := len(ranks)
	if n < 2 {
		return nil
	}
	pow := 1 << (bits.Len(uint(n)) - 1)
	var out []round
	var fold, back []flow
	for i := pow; i < n; i++ { // fold in, and later hand back: one round each
		fold = append(fold, flow{ranks[i], ranks[i-pow], bytes})
		back = append(back, flow{ranks[i-pow], ranks[i], bytes})
	}
	if fold != nil {
		out = append(out, round{fold, 1})
	}
	for m := 1; m < pow; m <<= 1 {
		flows := make([]flow, pow)
		for i := range pow {
			flows[i] = flow{ranks[i], ranks[i^m], bytes}
		}
		out = append(out, round{flows, 1})
	}
	if back != nil {
		out = append(out, round{back, 1})
	}
	return out
}

// binomialRounds is a binomial-tree reduce into each group's first rank
// (or, with down, a broadcast from it): ⌈lg n⌉ rounds of whole buffers,
// every group at once.
func binomialRounds(groups [][]int, bytes float64, down bool) []round {
	var out []round
	for m := 1; m < len(groups[0]); m <<= 1 {
		var flows []flow
		for _, ranks := range groups {
			for v := m; v < len(ranks); v += 2 * m {
				f := flow{ranks[v], ranks[v-m], bytes}
				if down {
					f.from, f.to = f.to, f.from
				}
				flows = append(flows, f)
			}
		}
		out = append(out, round{flows, 1})
	}
	if down {
		slices.Reverse(out)
	}
	return out
}

// hierRounds is the hierarchical allreduce: reduce to each host's leader,
// allreduce between the leaders, broadcast back.
func (c Cluster) hierRounds(bytes float64) []round {
	hosts := make([][]int, c.Hosts)
	leaders := make([]int, c.Hosts)
	for h := range hosts {
		leaders[h] = h * c.RanksPerHost
		for i := range c.RanksPerHost {
			hosts[h] = append(hosts[h], leaders[h]+i)
		}
	}
	out := binomialRounds(hosts, bytes, false)
	if bytes < RingThreshold {
		out = append(out, doublingRounds(leaders, bytes)...)
	} else {
		out = append(out, ringRounds(leaders, bytes)...)
	}
	return append(out, binomialRounds(hosts, bytes, true)...)
}
