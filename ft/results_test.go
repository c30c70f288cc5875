package ft

import (
	"slices"
	"testing"
)

func quorumOf(steps ...int64) Quorum {
	q := Quorum{ID: 1}
	for i, s := range steps {
		q.Members = append(q.Members, member("replica_"+string(rune('0'+i)), s))
	}
	return q
}

// TestQuorumResults ports torchft's manager.rs tests of
// compute_quorum_results: test_compute_quorum_results_first_step,
// _recovery (round robin over the up-to-date members, offset by the group
// rank), _skip_init_sync and _commit_failures.
func TestQuorumResults(t *testing.T) {
	first, recovery := quorumOf(0, 0), quorumOf(0, 1, 0, 1, 0)
	skip := quorumOf(1, 0)
	cases := []struct {
		name      string
		q         Quorum
		replica   string
		groupRank int
		initSync  bool
		heal      bool
		rank, src int
		srcAddr   string
		dst       []int
	}{
		{"first step, primary", first, "replica_0", 0, true, false, 0, -1, "", []int{1}},
		{"first step, the other heals", first, "replica_1", 0, true, true, 1, 0, "addr_replica_0", []int{}},
		{"first step, group rank 1's primary", first, "replica_1", 1, true, false, 1, -1, "", []int{0}},
		{"recovery, behind", recovery, "replica_0", 0, true, true, 0, 1, "addr_replica_1", []int{}},
		{"recovery, serves two", recovery, "replica_1", 0, true, false, 1, -1, "", []int{0, 4}},
		{"recovery, serves one", recovery, "replica_3", 0, true, false, 3, -1, "", []int{2}},
		{"recovery, offset by group rank", recovery, "replica_1", 1, true, false, 1, -1, "", []int{2}},
		{"first step without init sync", first, "replica_1", 0, false, false, 1, -1, "", []int{}},
		{"behind without init sync", skip, "replica_1", 0, false, true, 1, 0, "addr_replica_0", []int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := c.q.Results(c.replica, c.groupRank, c.initSync)
			if err != nil {
				t.Fatal(err)
			}
			if r.Heal != c.heal || r.ReplicaRank != c.rank || r.RecoverSrcRank != c.src || r.RecoverSrcAddr != c.srcAddr {
				t.Errorf("heal %t rank %d src %d %q, want %t %d %d %q", r.Heal, r.ReplicaRank, r.RecoverSrcRank,
					r.RecoverSrcAddr, c.heal, c.rank, c.src, c.srcAddr)
			}
			if !slices.Equal(r.RecoverDstRanks, c.dst) {
				t.Errorf("recover dst %v, want %v", r.RecoverDstRanks, c.dst)
			}
			if r.ReplicaWorldSize != len(c.q.Members) {
				t.Errorf("replica world size %d, want %d", r.ReplicaWorldSize, len(c.q.Members))
			}
		})
	}
}

// TestQuorumResultsFigures checks the rest of a result: max step, the
// members at it, the store and commit failures (test_get_quorum's and
// test_compute_quorum_results_commit_failures' figures).
func TestQuorumResultsFigures(t *testing.T) {
	q := quorumOf(3, 7, 7)
	q.Members[0].CommitFailures = 2
	r, err := q.Results("replica_2", 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxStep != 7 || r.MaxWorldSize != 2 || r.MaxReplicaRank != 1 || r.CommitFailures != 2 {
		t.Errorf("max step %d, max world %d, max rank %d, commit failures %d; want 7 2 1 2", r.MaxStep,
			r.MaxWorldSize, r.MaxReplicaRank, r.CommitFailures)
	}
	if r.StoreAddress != "store_replica_2" { // group rank 1 of the two at max step
		t.Errorf("store %q, want store_replica_2", r.StoreAddress)
	}
	if r, _ := q.Results("replica_0", 0, true); r.MaxReplicaRank != -1 || !r.Heal {
		t.Errorf("a replica behind: max rank %d heal %t, want -1 true", r.MaxReplicaRank, r.Heal)
	}
	if _, err := q.Results("nobody", 0, true); err == nil {
		t.Error("a replica outside the quorum got results")
	}
	if got := (Quorum{}).MaxStep(); got != -1 {
		t.Errorf("an empty quorum's max step %d, want -1", got)
	}
}

// TestQuorumResultsCommitChain: members at the max step on another chain
// than most of them heal like members behind it (Note [the commit chain]);
// a tie goes to the first holder's chain.
func TestQuorumResultsCommitChain(t *testing.T) {
	q := quorumOf(5, 5, 5, 4)
	q.Members[0].CommitChain, q.Members[1].CommitChain, q.Members[2].CommitChain = "a", "b", "b"
	for _, c := range []struct {
		replica string
		heal    bool
		src     int
	}{{"replica_0", true, 1}, {"replica_1", false, -1}, {"replica_2", false, -1}, {"replica_3", true, 2}} {
		r, err := q.Results(c.replica, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		if r.Heal != c.heal || r.RecoverSrcRank != c.src || r.CommitChain != "b" || r.MaxWorldSize != 2 {
			t.Errorf("%s: heal %t from %d, chain %q, %d up to date; want heal %t from %d, chain b, 2", c.replica,
				r.Heal, r.RecoverSrcRank, r.CommitChain, r.MaxWorldSize, c.heal, c.src)
		}
	}
	tie := quorumOf(5, 5)
	tie.Members[0].CommitChain, tie.Members[1].CommitChain = "z", "a"
	if r, _ := tie.Results("replica_1", 0, true); !r.Heal || r.CommitChain != "z" {
		t.Errorf("a tie: replica_1 heal %t, chain %q; want it to heal onto replica_0's chain z", r.Heal, r.CommitChain)
	}
}
