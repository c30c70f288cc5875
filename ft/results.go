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
	var atMax []int // ranks at max step
	for i, m := range ms {
		if m.Step == r.MaxStep {
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
		if m.Step != r.MaxStep || force && m.ReplicaID != primary.ReplicaID {
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
