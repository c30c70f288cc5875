package pg

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestStallErrorMatchesKindAndCause(t *testing.T) {
	cause := &CollectiveError{Op: "allreduce", Rank: 1, Peer: 0, Kind: ErrRemote, Err: ErrTimeout}
	e := &StallError{Rank: 1, Op: OpAllReduce, Seq: 9, Silent: []int{2}, Behind: []int{3}, StoreHost: NoPeer,
		Kind: ErrRemote, Err: cause,
		Progress: []RankProgress{{Rank: 0}, {Rank: 1}, {Rank: 2},
			{Rank: 3, Answered: true, Entered: 8, EnteredOp: OpBroadcast}}}
	var ce *CollectiveError
	if !errors.Is(e, ErrRemote) || !errors.Is(e, ErrTimeout) || !errors.As(e, &ce) || errors.Is(e, ErrComm) {
		t.Fatalf("errors.Is/As do not see through %v", e)
	}
	if got := e.Culprits(); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("culprits %v, want silent, then behind", got)
	}
	msg := e.Error()
	want := "pg: rank 2 did not answer (stopped or dead); rank 3 is behind (its last collective is broadcast #8; it " +
		"never entered #9) while rank 1 waited in allreduce #9; check ranks 2, 3: are their processes alive"
	if !strings.HasPrefix(msg, want) || strings.Contains(msg, "\n") || !strings.Contains(msg, "check ranks 2, 3:") {
		t.Fatalf("message\n%s\nwant prefix\n%s", msg, want)
	}
}

func TestStallErrorWithoutCulprit(t *testing.T) {
	e := &StallError{Rank: 0, Op: OpBarrier, Seq: 3, StoreHost: NoPeer, Kind: ErrComm, Err: ErrComm}
	if len(e.Culprits()) != 0 ||
		!strings.HasPrefix(e.Error(), "pg: barrier #3 failed on rank 0, but every rank answered") {
		t.Fatal(e)
	}
}

func TestMismatchErrorMessage(t *testing.T) {
	e := &MismatchError{Rank: 2, Seq: 4, Signature: "b", Signatures: []string{"a", "a", "b"}, Differ: []int{2}}
	if !errors.Is(e, ErrMismatch) || !strings.HasPrefix(
		e.Error(), "pg: rank 2: collective #4 differs across ranks: rank 2 issued b where rank 0 issued a (this rank: b)") {
		t.Fatal(e)
	}
}
