package ft

import (
	"fmt"
	"slices"
	"strings"
)

// Results is what one rank of one replica group takes from a quorum:
// torchft's ManagerQuorumResponse, computed as its manager's
// compute_quorum_results (src/manager.rs). Ranks are indices into the
// quorum's members sorted by replica id.
type Results struct {
	QuorumID         int64
	ReplicaRank      int   // this replica's index among the members
	ReplicaWorldSize int   // the number of members
	MaxStep          int64 // the largest step of any member
	MaxReplicaRank   int   // this replica's index among the members at MaxStep; -1 when it is behind
	MaxWorldSize     int   // the number of members at MaxStep
	StoreAddress     string
	Heal             bool   // this replica must recover its state before the step
	RecoverSrcRank   int    // the member it recovers from; -1 when it does not heal
	RecoverSrcAddr   string // that member's Address
	RecoverDstRanks  []int  // the members that recover from this one
	CommitFailures   int64  // the largest CommitFailures of any member
	// CommitChain is the chain of the members that go on: among those at
	// MaxStep, the chain most of them hold (Note [the commit chain]).
	// A member at MaxStep with another chain is behind like one at a
	// smaller step: it heals.
	CommitChain string
}

// Note [the commit chain]: a commit vote can complete on some members and
// fail on others (one dies during the vote, or freezes in it and finds its
// peers' votes waiting when it thaws). Each outcome is sound (a member
// commits only a complete average), but the histories part: a member that
// committed step t alone is at t+1 while the others redo t with fewer
// participants and reach t+1 with another state. Step counts cannot tell
// the two apart, so every member also carries a chain: a hash of the
// previous chain, the quorum id, the step and the participants, extended on
// every commit. Members at the max step whose chain differs from the one
// most of them hold (ties: the chain of the first such member by replica
// id) are behind, and heal; a healer takes its source's chain with its
// state. So two members that go on together always share their history,
// and the record of a run follows one chain back from its end.

// current is the members of ms (sorted by replica id) that are up to
// date: at maxStep, holding the chain most of those at maxStep hold.
func current(ms []Member, maxStep int64) (chain string, up []bool) {
	count := map[string]int{}
	best := 0
	for _, m := range ms {
		if m.Step == maxStep {
			count[m.CommitChain]++
			best = max(best, count[m.CommitChain])
		}
	}
	for _, m := range ms { // a tie goes to the chain whose first holder comes first
		if m.Step == maxStep && count[m.CommitChain] == best {
			chain = m.CommitChain
			break
		}
	}
	up = make([]bool, len(ms))
	for i, m := range ms {
		up[i] = m.Step == maxStep && m.CommitChain == chain
	}
	return chain, up
}

// Results computes r for replicaID's rank groupRank (its rank inside its
// replica group; it spreads the groups' ranks over the up-to-date peers
// and stores). With initSync, at max step 0 every member but the primary
// heals from it, so all start from one set of weights. It fails when
// replicaID is not a member of q.
func (q Quorum) Results(replicaID string, groupRank int, initSync bool) (Results, error) {
	ms := slices.Clone(q.Members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
	rank := slices.IndexFunc(ms, func(m Member) bool { return m.ReplicaID == replicaID })
	if rank < 0 {
		return Results{}, fmt.Errorf("ft: replica %q is not in quorum %d", replicaID, q.ID)
	}
	r := Results{QuorumID: q.ID, ReplicaRank: rank, ReplicaWorldSize: len(ms), MaxStep: q.MaxStep(),
		MaxReplicaRank: -1, RecoverSrcRank: -1, RecoverDstRanks: []int{}}
	var up []bool
	r.CommitChain, up = current(ms, r.MaxStep)
	var atMax []int // ranks at max step, on its chain
	for i, m := range ms {
		if up[i] {
			if i == rank {
				r.MaxReplicaRank = len(atMax)
			}
			atMax = append(atMax, i)
		}
		r.CommitFailures = max(r.CommitFailures, m.CommitFailures)
	}
	r.MaxWorldSize = len(atMax)
	primary := ms[atMax[groupRank%len(atMax)]]
	r.StoreAddress = primary.StoreAddress
	force := initSync && r.MaxStep == 0
	var dst, upToDate []int
	for i, m := range ms {
		if !up[i] || force && m.ReplicaID != primary.ReplicaID {
			dst = append(dst, i)
		} else {
			upToDate = append(upToDate, i)
		}
	}
	for i, d := range dst { // round robin, offset by the group rank
		src := upToDate[(i+groupRank)%len(upToDate)]
		if src == rank {
			r.RecoverDstRanks = append(r.RecoverDstRanks, d)
		}
		if d == rank {
			r.RecoverSrcRank, r.RecoverSrcAddr = src, ms[src].Address
		}
	}
	r.Heal = r.RecoverSrcRank >= 0
	return r, nil
}
