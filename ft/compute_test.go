package ft

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func member(id string, step int64) Member {
	return Member{ReplicaID: id, Address: "addr_" + id, StoreAddress: "store_" + id, Step: step, WorldSize: 1}
}

// world builds a state: participants (asked and heartbeating now),
// heartbeating-only replicas, and a previous quorum.
type world struct {
	asking     []string
	shrink     []string // askers with ShrinkOnly
	only       []string // heartbeating, not asking
	prev       []string
	staleBeats []string       // their heartbeats are 10s old
	joinedAgo  time.Duration  // the first asker joined this long ago
	opt        func(*Options) // changes to the options
}

func (w world) build() (state, Options) {
	s := newState()
	for i, id := range append(slices.Clone(w.asking), w.shrink...) {
		m := member(id, 1)
		m.ShrinkOnly = slices.Contains(w.shrink, id)
		joined := t0
		if i == 0 {
			joined = t0.Add(-w.joinedAgo)
		}
		s.participants[id] = participant{member: m, joined: joined}
		s.heartbeats[id] = t0
	}
	for _, id := range w.only {
		s.heartbeats[id] = t0
	}
	for _, id := range w.staleBeats {
		s.heartbeats[id] = t0.Add(-10 * time.Second)
	}
	if w.prev != nil {
		q := Quorum{ID: 1}
		for _, id := range w.prev {
			q.Members = append(q.Members, member(id, 1))
		}
		s.prev = &q
	}
	o := Options{MinReplicas: 1, JoinTimeout: time.Hour, QuorumTick: 10 * time.Millisecond,
		HeartbeatTimeout: 5 * time.Second}
	if w.opt != nil {
		w.opt(&o)
	}
	return s, o
}

// TestQuorumCompute ports the scenarios of torchft's lighthouse.rs tests
// (test_quorum_join_timeout, test_quorum_heartbeats,
// test_quorum_fast_prev_quorum, test_quorum_shrink_only,
// test_quorum_split_brain), their reasons checked in torchft's words,
// and adds min_replicas.
func TestQuorumCompute(t *testing.T) {
	zeroJoin := func(o *Options) { o.JoinTimeout = 0 }
	cases := []struct {
		name   string
		w      world
		want   []string // the members; nil: no quorum
		reason string   // a substring of the reason
	}{
		{"empty", world{}, nil,
			"New quorum not ready, only have 0 participants, need min_replicas 1 [0/0 participants healthy]"},
		{"all healthy joined", world{asking: []string{"b", "a"}}, []string{"a", "b"}, "Valid quorum found"},
		{"straggler within join timeout", world{asking: []string{"a", "b"}, only: []string{"c"}}, nil,
			"join timeout"},
		{"straggler after join timeout", world{asking: []string{"a", "b"}, only: []string{"c"},
			joinedAgo: 10 * time.Hour}, []string{"a", "b"}, "Valid quorum found"},
		{"join timeout counts from the first", world{asking: []string{"a", "b"}, only: []string{"c"},
			joinedAgo: time.Hour - time.Nanosecond}, nil, "join timeout"},
		{"heartbeating", world{asking: []string{"a"}, opt: zeroJoin}, []string{"a"},
			"[1/1 participants healthy][1 heartbeating]"},
		{"expired heartbeat", world{asking: []string{"a"}, staleBeats: []string{"a"}, opt: zeroJoin}, nil,
			"[0/1 participants healthy][0 heartbeating]"},
		{"one healthy one expired", world{asking: []string{"a", "b"}, staleBeats: []string{"a"}, opt: zeroJoin},
			[]string{"b"}, "[1/2 participants healthy][1 heartbeating]"},
		{"split brain", world{asking: []string{"a"}, only: []string{"b"}}, nil,
			"New quorum not ready, only have 1 participants, need at least half of 2 healthy workers " +
				"[1/1 participants healthy][2 heartbeating]"},
		{"majority of three", world{asking: []string{"a", "b"}, only: []string{"c"}, opt: zeroJoin},
			[]string{"a", "b"}, "Valid quorum found"},
		{"fast quorum", world{asking: []string{"a"}, only: []string{"b"}, prev: []string{"a"}}, []string{"a"},
			"Fast quorum found!"},
		{"fast quorum grows", world{asking: []string{"a", "b"}, prev: []string{"a"}}, []string{"a", "b"},
			"Fast quorum found!"},
		{"not fast: a previous member is not asking", world{asking: []string{"a"}, only: []string{"b"},
			prev: []string{"a", "b"}}, nil, "need at least half"},
		{"shrink only", world{shrink: []string{"a", "c"}, prev: []string{"a", "b"}}, []string{"a"},
			"[shrink_only=true]"},
		{"fast shrink only keeps newcomers out", world{asking: []string{"b", "j"}, shrink: []string{"a"},
			prev: []string{"a", "b"}}, []string{"a", "b"}, "Fast quorum found! [3/3 participants healthy]"},
		{"min replicas", world{asking: []string{"a"}, opt: func(o *Options) { o.MinReplicas = 2 }}, nil,
			"need min_replicas 2"},
		{"min replicas met", world{asking: []string{"a", "b"}, opt: func(o *Options) { o.MinReplicas = 2 }},
			[]string{"a", "b"}, "Valid quorum found"},
		{"fast quorum ignores min replicas", world{asking: []string{"a"}, prev: []string{"a"},
			opt: func(o *Options) { o.MinReplicas = 2 }}, []string{"a"}, "Fast quorum found!"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, o := c.w.build()
			ms, ok, reason := compute(t0, &s, &o)
			if ok != (c.want != nil) {
				t.Fatalf("quorum formed %t, want %t: %s", ok, c.want != nil, reason)
			}
			if got := (Quorum{Members: ms}).IDs(); ok && !slices.Equal(got, c.want) {
				t.Errorf("members %v, want %v (%s)", got, c.want, reason)
			}
			if !strings.Contains(reason, c.reason) {
				t.Errorf("reason %q, want it to hold %q", reason, c.reason)
			}
		})
	}
}

// TestSameIDs ports test_quorum_changed: only the replica ids count.
func TestSameIDs(t *testing.T) {
	a := []Member{member("1", 1)}
	b := []Member{{ReplicaID: "1", Address: "changed", StoreAddress: "changed", Step: 1000}}
	if !sameIDs(a, b) {
		t.Error("same replica ids, other addresses and steps: changed")
	}
	if sameIDs(a, []Member{member("2", 1)}) {
		t.Error("another replica id: not changed")
	}
}
