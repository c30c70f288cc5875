package shm

import (
	"slices"
	"strconv"
	"strings"
)

// Layout is how a group that spans hosts, some of which hold several of
// its ranks, is spread over them: the same on every rank. The
// hierarchical AllReduce follows it.
type Layout struct {
	Hosts   [][]int // each host's ranks, ascending; hosts in order of their lowest rank
	Leaders []int   // each host's lowest rank, ascending
	Mine    int     // the index of this rank's host
}

// newLayout is the layout of hosts for rank, or nil when the group needs
// none: it lies on one host, or no host holds more than one of its ranks.
func newLayout(hosts [][]int, rank int) *Layout {
	if len(hosts) < 2 || !slices.ContainsFunc(hosts, func(h []int) bool { return len(h) > 1 }) {
		return nil
	}
	l := &Layout{Hosts: hosts}
	for i, rs := range hosts {
		l.Leaders = append(l.Leaders, rs[0])
		if slices.Contains(rs, rank) {
			l.Mine = i
		}
	}
	return l
}

// agreeHosts groups a group's ranks by host, from what every rank
// published: host[j] is the identity of rank j's host ("" if it shares
// memory with no one) and mapped[j] the ranks whose segments it mapped.
// Two ranks can share memory when each mapped the other's segment, and a
// host's world is a set of its ranks every two of which can. A host
// identity may hold several such worlds (ranks in separate network
// namespaces of one machine reach each other's sockets only within their
// namespace, as Kubernetes pods on one node do), so each identity's ranks
// are split into cliques (see cliques). Ranks left in no world of two or
// more are hosts of their own. The result, hosts in order of their lowest
// rank, depends only on its inputs, which every rank reads alike from
// the store, so every rank computes the same.
func agreeHosts(host []string, mapped [][]int) [][]int {
	sets := make([]map[int]bool, len(mapped))
	for j, m := range mapped {
		sets[j] = make(map[int]bool, len(m))
		for _, k := range m {
			sets[j][k] = true
		}
	}
	can := func(a, b int) bool { return sets[a][b] && sets[b][a] }
	var out [][]int
	placed := make([]bool, len(host))
	for j, h := range host {
		if h == "" || placed[j] {
			continue
		}
		var set []int
		for k := j; k < len(host); k++ {
			if host[k] == h {
				set = append(set, k)
				placed[k] = true
			}
		}
		out = append(out, cliques(set, can)...)
	}
	shared := make([]bool, len(host))
	for _, set := range out {
		for _, r := range set {
			shared[r] = true
		}
	}
	for j := range host {
		if !shared[j] {
			out = append(out, []int{j})
		}
	}
	slices.SortFunc(out, func(a, b []int) int { return a[0] - b[0] })
	return out
}

// cliques splits set (ascending) into worlds of two or more ranks every
// two of which can share memory. Each round takes the ranks connected,
// directly or not, to the lowest rank left, and drops from them the rank
// that can share with the fewest of the others (the highest among
// equals) until every two remaining can; that world is kept, and the
// dropped ranks go back for the next rounds, where they may form a world
// of their own. A round that keeps no world sets its lowest rank aside,
// so every round makes progress.
func cliques(set []int, can func(a, b int) bool) [][]int {
	var out [][]int
	for len(set) > 1 {
		world := shrinkToClique(component(set, can), can)
		if len(world) < 2 {
			world = set[:1]
		} else {
			out = append(out, world)
		}
		set = slices.DeleteFunc(slices.Clone(set), func(r int) bool { return slices.Contains(world, r) })
	}
	return out
}

// component is the ranks of set connected to set[0] through can, ascending.
func component(set []int, can func(a, b int) bool) []int {
	in := map[int]bool{set[0]: true}
	for grew := true; grew; {
		grew = false
		for _, a := range set {
			if in[a] {
				continue
			}
			for b := range in {
				if can(a, b) {
					in[a], grew = true, true
					break
				}
			}
		}
	}
	return slices.DeleteFunc(slices.Clone(set), func(r int) bool { return !in[r] })
}

// shrinkToClique drops from set the rank that can share with the fewest
// of the others (the highest among equals) until every two remaining can.
func shrinkToClique(set []int, can func(a, b int) bool) []int {
	for len(set) > 1 {
		worst, least := -1, len(set)
		for _, a := range set {
			d := 0
			for _, b := range set {
				if a != b && can(a, b) {
					d++
				}
			}
			if d <= least {
				worst, least = a, d
			}
		}
		if least == len(set)-1 {
			break
		}
		set = slices.DeleteFunc(set, func(a int) bool { return a == worst })
	}
	return set
}

// formatRanks and parseRanks write and read a list of ranks as the store
// holds it: "1,3,4". parseRanks drops anything that is not a rank of a
// group of size n.
func formatRanks(rs []int) string {
	b := make([]byte, 0, 4*len(rs))
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return string(b)
}

func parseRanks(s string, n int) []int {
	var rs []int
	for f := range strings.SplitSeq(s, ",") {
		if r, err := strconv.Atoi(f); err == nil && r >= 0 && r < n {
			rs = append(rs, r)
		}
	}
	return rs
}
