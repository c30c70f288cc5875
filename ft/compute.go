package ft

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// participant is a member waiting for a quorum, since joined.
type participant struct {
	member Member
	joined time.Time
}

// state is what the quorum rules read: torchft's lighthouse State.
type state struct {
	participants map[string]participant // replica id -> its request
	heartbeats   map[string]time.Time   // replica id -> its last heartbeat
	prev         *Quorum                // the last quorum formed, nil before the first
}

func newState() state {
	return state{participants: map[string]participant{}, heartbeats: map[string]time.Time{}}
}

// compute is torchft's quorum_compute (src/lighthouse.rs): the members
// of the quorum to form now, sorted by replica id, or ok false; and why,
// in torchft's words.
func compute(now time.Time, s *state, o *Options) (members []Member, ok bool, reason string) {
	healthy := map[string]bool{}
	for id, last := range s.heartbeats {
		if now.Sub(last) < o.HeartbeatTimeout {
			healthy[id] = true
		}
	}
	var cands []Member
	first, shrinkOnly := now, false
	for id, p := range s.participants {
		if !healthy[id] {
			continue
		}
		cands = append(cands, p.member)
		shrinkOnly = shrinkOnly || p.member.ShrinkOnly
		if p.joined.Before(first) {
			first = p.joined
		}
	}
	slices.SortFunc(cands, func(a, b Member) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
	n := len(cands)
	meta := fmt.Sprintf("[%d/%d participants healthy][%d heartbeating][shrink_only=%t]",
		n, len(s.participants), len(healthy), shrinkOnly)
	if s.prev != nil {
		if shrinkOnly {
			cands = slices.DeleteFunc(cands, func(m Member) bool { return !s.prev.Has(m.ReplicaID) })
		}
		fast := true // every previous member is a healthy participant again
		for _, m := range s.prev.Members {
			_, asked := s.participants[m.ReplicaID]
			fast = fast && asked && healthy[m.ReplicaID]
		}
		if fast {
			return cands, true, "Fast quorum found! " + meta
		}
	}
	if n < o.MinReplicas {
		return nil, false, fmt.Sprintf("New quorum not ready, only have %d participants, need min_replicas %d %s",
			n, o.MinReplicas, meta)
	}
	if n <= len(healthy)/2 { // no split brain: more than half of the healthy replicas
		return nil, false, fmt.Sprintf("New quorum not ready, only have %d participants, need at least half of %d "+
			"healthy workers %s", n, len(healthy), meta)
	}
	if n != len(healthy) && now.Sub(first) < o.JoinTimeout {
		return nil, false, fmt.Sprintf("Valid quorum with %d participants, waiting for %d healthy but not "+
			"participating stragglers due to join timeout %s", n, len(healthy)-n, meta)
	}
	return cands, true, "Valid quorum found " + meta
}
