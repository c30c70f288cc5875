package ft

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Member is one replica group asking for a quorum: torchft's
// QuorumMember (proto/torchft.proto).
type Member struct {
	ReplicaID      string `json:"replica_id"`
	Address        string `json:"address,omitempty"`       // where the replica's manager listens (the heal source)
	StoreAddress   string `json:"store_address,omitempty"` // the replica group's store
	Step           int64  `json:"step"`                    // the step the replica is at
	WorldSize      uint64 `json:"world_size"`              // ranks in the replica group
	ShrinkOnly     bool   `json:"shrink_only,omitempty"`   // admit no replica outside the previous quorum
	CommitFailures int64  `json:"commit_failures,omitempty"`
	// CommitChain names the replica's history of committed steps (Note
	// [the commit chain]): members at one step with different chains
	// hold different states.
	CommitChain string `json:"commit_chain,omitempty"`
	Data        string `json:"data,omitempty"` // opaque to the Lighthouse
}

// Quorum is a formed quorum: its id and members, sorted by replica id.
type Quorum struct {
	ID      int64     `json:"quorum_id"`
	Members []Member  `json:"participants"`
	Created time.Time `json:"created"`
}

// MaxStep is the largest step of q's members, -1 for an empty quorum
// (as torchft's status page).
func (q Quorum) MaxStep() int64 {
	m := int64(-1)
	for _, p := range q.Members {
		m = max(m, p.Step)
	}
	return m
}

// Has reports whether replicaID is a member of q.
func (q Quorum) Has(replicaID string) bool {
	return slices.ContainsFunc(q.Members, func(m Member) bool { return m.ReplicaID == replicaID })
}

// IDs are q's members' replica ids, in order.
func (q Quorum) IDs() []string {
	ids := make([]string, len(q.Members))
	for i, m := range q.Members {
		ids[i] = m.ReplicaID
	}
	return ids
}

// String is "quorum ID [a b c] max_step S".
func (q Quorum) String() string {
	return fmt.Sprintf("quorum %d [%s] max_step %d", q.ID, strings.Join(q.IDs(), " "), q.MaxStep())
}

// sameIDs is torchft's quorum_changed negated: the members' replica ids
// are equal, in order (addresses and steps do not count).
func sameIDs(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool { return x.ReplicaID == y.ReplicaID })
}
