package pg

import (
	"fmt"
	"strings"
)

// RankProgress is where one rank stood in a group's collectives when a
// stall was diagnosed (see StallError).
type RankProgress struct {
	Rank int
	// Answered is false when the rank did not publish its progress within
	// the diagnosis timeout: it is stopped, dead, or its process is stuck.
	Answered bool
	// Entered is the sequence number of the last collective the rank
	// issued (0: none), EnteredOp its op.
	Entered   uint64
	EnteredOp OpType
	// Finished is the last sequence number up to which every collective
	// of the rank had finished.
	Finished uint64
	// AtSeq describes the collective the rank issued as the stalled
	// sequence number ("allreduce(float32 x1024, SUM)"), or "" if the
	// rank did not report it.
	AtSeq string
	// Reach is what a network probe of the rank found (Note [network or
	// process]), when the diagnosis probed it: a silent rank, or every
	// rank when the store did not answer; Addr is the address probed.
	Reach Reach
	Addr  string
}

// StallError is a collective's timeout, communication or remote error
// explained by a diagnosis across the group's ranks, as c10d's desync
// report (TORCH_NCCL_DESYNC_DEBUG): which ranks had not entered the
// collective, which did not answer at all, and which issued a different
// collective at the same position. Every rank that sees the failure gets
// the same diagnosis, so all of them name the same culprit.
//
// errors.Is matches Kind (ErrTimeout, ErrComm or ErrRemote, as the
// original error) and everything Err wraps.
type StallError struct {
	Rank int    // the reporting rank
	Op   OpType // the collective that failed first in this group
	Seq  uint64 // its sequence number
	// Behind are the ranks that answered but had not entered collective
	// Seq; Silent those that did not answer (stopped or dead);
	// Mismatched those that issued a different collective as number Seq.
	// All ascending.
	Behind, Silent, Mismatched []int
	// Unreachable are the ranks whose host a network probe found not
	// answering (Reach ReachNoHost): the network to them is down or
	// partitioned. Silent ranks among them are in Silent too.
	Unreachable []int
	// Progress has one entry per rank of the group, index = rank.
	Progress []RankProgress
	// StoreErr is set when the store the diagnosis runs over did not
	// answer; StoreHost is then the rank hosting it, or NoPeer.
	StoreErr  error
	StoreHost int
	Kind      error // ErrTimeout, ErrComm or ErrRemote
	Err       error // this rank's original error
	// Group names a subgroup in messages ("" for a top-level group);
	// ParentRanks then holds each of its ranks' rank in the parent
	// group, index = rank, when known.
	Group       string
	ParentRanks []int
}

// Culprits are the ranks to look at, in the order the message names
// them: silent, then unreachable, then behind, then mismatched. With a
// store that did not answer and no other finding, it is the store's host
// rank.
func (e *StallError) Culprits() []int {
	var out []int
	add := func(rs []int) {
		for _, r := range rs {
			if !containsInt(out, r) {
				out = append(out, r)
			}
		}
	}
	add(e.Silent)
	add(e.Unreachable)
	add(e.Behind)
	add(e.Mismatched)
	if len(out) == 0 && e.StoreErr != nil && e.StoreHost != NoPeer {
		out = append(out, e.StoreHost)
	}
	return out
}

// Error is one line that names the culprits first, then what the
// reporting rank was doing, what to check, and the original error (wrapped
// here):
//
//	pg: rank 2 did not answer (stopped or dead) while rank 1 waited in allreduce #57; check rank 2: is its process alive,
//	    stopped, or stuck outside collectives? (cause: ...)
func (e *StallError) Error() string {
	why := e.silentPhrases()
	if far := e.unreachableNotSilent(); len(far) > 0 {
		why = append(why, fmt.Sprintf("%s cannot be reached (%s)", e.ranks(far), e.reachOf(far)))
	}
	for _, r := range e.Behind {
		p := e.progress(r)
		last := "it has issued no collective"
		if p.Entered > 0 {
			last = fmt.Sprintf("its last collective is %v #%d", p.EnteredOp, p.Entered)
		}
		why = append(why, fmt.Sprintf("%s is behind (%s; it never entered #%d)", e.ranks([]int{r}), last, e.Seq))
	}
	ref := ""
	for _, p := range e.Progress {
		if p.AtSeq != "" && !containsInt(e.Mismatched, p.Rank) {
			ref = fmt.Sprintf(" where %s issued %s", e.ranks([]int{p.Rank}), p.AtSeq)
			break
		}
	}
	for _, r := range e.Mismatched {
		why = append(why, fmt.Sprintf("%s issued %s as #%d%s", e.ranks([]int{r}), e.progress(r).AtSeq, e.Seq, ref))
	}
	if e.StoreErr != nil {
		why = append(why, "the store did not answer"+e.storeHostPhrase())
	}
	var b strings.Builder
	b.WriteString("pg: ")
	where := fmt.Sprintf("rank %d", e.Rank)
	if e.Group != "" {
		where += " of group " + e.Group
	}
	if len(why) > 0 {
		fmt.Fprintf(&b, "%s while %s waited in %v #%d", strings.Join(why, "; "), where, e.Op, e.Seq)
	} else {
		fmt.Fprintf(&b, "%v #%d failed on %s, but every rank answered and had entered it, so none is behind; the fault is "+
			"in the transport or a host", e.Op, e.Seq, where)
	}
	e.writeAdvice(&b)
	var causes []string
	if e.StoreErr != nil {
		causes = append(causes, fmt.Sprintf("store: %v", e.StoreErr))
	}
	if e.Err != nil {
		causes = append(causes, fmt.Sprintf("cause: %v", e.Err))
	}
	if len(causes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(causes, "; "))
	}
	return b.String()
}

// silentPhrases says which ranks did not answer, grouped by what the
// network probes found of them: Note [network or process].
func (e *StallError) silentPhrases() []string {
	var out []string
	for _, reach := range []Reach{ReachUnknown, ReachNoHost, ReachAnswers, ReachRefused} {
		var rs []int
		for _, r := range e.Silent {
			if e.progress(r).Reach == reach {
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			out = append(out, fmt.Sprintf("%s did not answer (%s)", e.ranks(rs), e.reachOf(rs)))
		}
	}
	return out
}

// reachOf says what the probes of rs, which share a Reach, found.
func (e *StallError) reachOf(rs []int) string {
	addrs := make([]string, len(rs))
	for i, r := range rs {
		addrs[i] = e.progress(r).Addr
	}
	return reachDetail(e.progress(rs[0]).Reach, addrs, len(rs) > 1)
}

func (e *StallError) unreachableNotSilent() []int {
	var out []int
	for _, r := range e.Unreachable {
		if !containsInt(e.Silent, r) {
			out = append(out, r)
		}
	}
	return out
}

// storeHostPhrase names the store's host, with what a probe found of it.
func (e *StallError) storeHostPhrase() string {
	if e.StoreHost == NoPeer {
		return ""
	}
	host := e.ranks([]int{e.StoreHost})
	switch {
	case containsInt(e.Unreachable, e.StoreHost):
		return fmt.Sprintf(" (hosted by %s, which cannot be reached)", host)
	case e.progress(e.StoreHost).Reach != ReachUnknown:
		return fmt.Sprintf(" (hosted by %s: %s)", host, e.reachOf([]int{e.StoreHost}))
	}
	return fmt.Sprintf(" (hosted by %s, which is likely stopped or dead)", host)
}

// writeAdvice says what to check: the network to the unreachable
// culprits' hosts, the others' processes.
func (e *StallError) writeAdvice(b *strings.Builder) {
	if len(e.Mismatched) > 0 {
		b.WriteString("; make every rank issue the same collectives in the same order")
		return
	}
	var procs, far []int
	var hosts []string
	for _, r := range e.Culprits() {
		if !containsInt(e.Unreachable, r) {
			procs = append(procs, r)
			continue
		}
		far = append(far, r)
		if h := hostOf(e.progress(r).Addr); h != "" && !containsString(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if len(far) > 0 {
		fmt.Fprintf(b, "; check the network between this host and %s (%s)", strings.Join(hosts, ", "), e.ranks(far))
	}
	if len(procs) > 0 {
		q := "is its process"
		if len(procs) > 1 {
			q = "are their processes"
		}
		fmt.Fprintf(b, "; check %s: %s alive, stopped, or stuck outside collectives?", e.ranks(procs), q)
	}
}

// ranks names rs, with their parent ranks in a subgroup:
// "rank 2 (parent rank 3)".
func (e *StallError) ranks(rs []int) string {
	s := ranksPhrase(rs)
	if len(e.ParentRanks) == 0 {
		return s
	}
	parents := make([]int, len(rs))
	for i, r := range rs {
		parents[i] = -1
		if r >= 0 && r < len(e.ParentRanks) {
			parents[i] = e.ParentRanks[r]
		}
	}
	return s + " (parent " + ranksPhrase(parents) + ")"
}

func (e *StallError) progress(r int) RankProgress {
	if r >= 0 && r < len(e.Progress) {
		return e.Progress[r]
	}
	return RankProgress{Rank: r}
}

// Unwrap returns Kind and Err, so errors.Is matches both.
func (e *StallError) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// MismatchError is a collective whose signature (op, dtype, lengths,
// root, reduce op, split sizes) differs across ranks, found before it was
// issued by a checking wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL's
// fingerprint check). Every rank gets the same error. It wraps
// ErrMismatch.
type MismatchError struct {
	Rank      int    // the reporting rank
	Seq       uint64 // the collective's sequence number
	Signature string // this rank's signature
	// Signatures holds every rank's signature, index = rank. Differ
	// are the ranks whose signature is not the majority's (ties go to
	// the group holding the lowest rank), ascending; Reason is set
	// when the disagreement cannot be pinned on ranks (uneven
	// all-to-all split sizes that do not pair up).
	Signatures []string
	Differ     []int
	Reason     string
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pg: rank %d: collective #%d differs across ranks", e.Rank, e.Seq)
	if len(e.Differ) > 0 {
		ref := -1
		for r := range e.Signatures {
			if !containsInt(e.Differ, r) {
				ref = r
				break
			}
		}
		var parts []string
		for _, r := range e.Differ {
			parts = append(parts, fmt.Sprintf("rank %d issued %s", r, e.Signatures[r]))
		}
		fmt.Fprintf(&b, ": %s", strings.Join(parts, ", "))
		if ref >= 0 {
			fmt.Fprintf(&b, " where rank %d issued %s", ref, e.Signatures[ref])
		}
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	fmt.Fprintf(&b, " (this rank: %s); make every rank issue the same collectives in the same order with the same "+
		"dtypes, sizes and roots", e.Signature)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

func ranksPhrase(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
