package pg

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The diagnosis's words follow the probes: the network for a host that
// does not answer, the process for one that does or refuses; a rank the
// store failure hid is named when its host does not answer.
func TestStallErrorSaysNetworkOrProcess(t *testing.T) {
	prog := func(reach Reach, addr string) []RankProgress {
		ps := make([]RankProgress, 4)
		for r := range ps {
			ps[r] = RankProgress{Rank: r, Answered: r < 2}
		}
		ps[2].Reach, ps[2].Addr = reach, addr
		ps[3].Reach, ps[3].Addr = reach, strings.Replace(addr, ":41", ":42", 1)
		return ps
	}
	tests := []struct {
		reach   Reach
		want    string
		advice  string
		network bool
	}{
		{ReachNoHost, "ranks 2, 3 did not answer (unreachable: their host 10.98.0.2 does not answer: the network to it is " +
			"down or partitioned) while rank 0",
			"; check the network between this host and 10.98.0.2 (ranks 2, 3)", true},
		{ReachAnswers, "ranks 2, 3 did not answer (stopped or busy: their host 10.98.0.2 answers, but the processes do not " +
			"respond) while rank 0",
			"; check ranks 2, 3: are their processes alive", false},
		{ReachRefused, "ranks 2, 3 did not answer (gone: their host 10.98.0.2 refused the connection: the processes are " +
			"gone) while rank 0",
			"; check ranks 2, 3: are their processes alive", false},
		{ReachUnknown, "ranks 2, 3 did not answer (stopped or dead) while rank 0",
			"; check ranks 2, 3: are their processes alive", false},
	}
	for _, tt := range tests {
		e := &StallError{Rank: 0, Op: OpAllReduce, Seq: 5, Silent: []int{2, 3}, StoreHost: NoPeer, Kind: ErrTimeout,
			Progress: prog(tt.reach, "10.98.0.2:41000")}
		if tt.network {
			e.Unreachable = []int{2, 3}
		}
		msg := e.Error()
		if !strings.HasPrefix(msg, "pg: "+tt.want) || !strings.Contains(msg, tt.advice) {
			t.Errorf("%v:\n%s\nwant prefix %q and %q", tt.reach, msg, tt.want, tt.advice)
		}
		if tt.network == strings.Contains(msg, "stuck outside collectives") {
			t.Errorf("%v: the advice is about the wrong thing:\n%s", tt.reach, msg)
		}
	}
	// Seen from the far side of a partition: the store is unreachable,
	// and so are ranks 0 and 1, on the store's host.
	ps := make([]RankProgress, 4)
	for r := range ps {
		ps[r] = RankProgress{Rank: r, Reach: ReachNoHost, Addr: fmt.Sprintf("10.98.0.1:4100%d", r)}
	}
	ps[3].Reach = ReachAnswers
	e := &StallError{Rank: 2, Op: OpAllReduce, Seq: 5, StoreHost: 0, StoreErr: ErrComm, Unreachable: []int{0, 1},
		Progress: ps, Kind: ErrTimeout}
	want := "pg: ranks 0, 1 cannot be reached (unreachable: their host 10.98.0.1 does not answer: the network to it is " +
		"down or partitioned); the store did not answer (hosted by rank 0, which cannot be reached) while rank 2 waited in " +
		"allreduce #5; check the network between this host and 10.98.0.1 (ranks 0, 1) (store: "
	if msg := e.Error(); !strings.HasPrefix(msg, want) {
		t.Errorf("partitioned from the store:\n%s\nwant prefix\n%s", msg, want)
	}
	if got := e.Culprits(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("culprits %v, want the unreachable ranks 0, 1", got)
	}
	e.Unreachable, e.Progress[0].Reach = nil, ReachRefused
	want = "pg: the store did not answer (hosted by rank 0: gone: its host 10.98.0.1 refused the connection: the " +
		"process is gone) while rank 2"
	if msg := e.Error(); !strings.HasPrefix(msg, want) {
		t.Errorf("store host gone:\n%s\nwant prefix\n%s", msg, want)
	}
}
