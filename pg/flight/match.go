package flight

import (
	"fmt"
	"math"
	"slices"
)

// rankOps are one rank's collectives of one group by sequence number,
// and the oldest sequence number its ring still holds.
type rankOps struct {
	bySeq  map[uint64]*Entry
	oldest uint64
}

// collect gathers the collectives of group name on each of ranks.
func collect(dumps map[int]Dump, name string, ranks []int) (map[int]rankOps, uint64) {
	ops := make(map[int]rankOps, len(ranks))
	var last uint64
	for _, r := range ranks {
		d, ok := dumps[r]
		if !ok {
			continue // no dump: nothing to say of it (see MissingDumps)
		}
		ro := rankOps{bySeq: map[uint64]*Entry{}, oldest: math.MaxUint64}
		for i := range d.Entries {
			e := &d.Entries[i]
			if e.IsP2P || e.ProcessGroup[0] != name {
				continue
			}
			ro.bySeq[e.CollectiveSeqID] = e
			ro.oldest = min(ro.oldest, e.CollectiveSeqID)
			last = max(last, e.CollectiveSeqID)
		}
		if len(ro.bySeq) == 0 {
			ro.oldest = 1 // issued none: missing from the first on
		}
		ops[r] = ro
	}
	return ops, last
}

// heldSeqs are the sequence numbers some rank holds, ascending: a dump
// may claim any number (a 763-byte dump with one entry numbered 10^15
// held fr-trace counting up to it, for months), but only those held can
// differ.
func heldSeqs(ops map[int]rankOps) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	for _, ro := range ops {
		for seq := range ro.bySeq {
			if !seen[seq] {
				seen[seq] = true
				out = append(out, seq)
			}
		}
	}
	slices.Sort(out)
	return out
}

// analyzeGroup finds the first collective of group name on which the
// ranks disagree.
func analyzeGroup(dumps map[int]Dump, name string) (Finding, bool) {
	ranks, desc := members(dumps, name)
	ops, _ := collect(dumps, name, ranks)
	for _, seq := range heldSeqs(ops) { // a number no rank holds has nothing to compare
		if f, ok := compare(ops, ranks, seq); ok {
			f.Group, f.Expected = name+":"+desc, len(ranks)
			return f, true
		}
	}
	return Finding{}, false
}

// compare checks collective seq across ranks: who lacks it, and who
// issued something other than what the most ranks issued.
func compare(ops map[int]rankOps, ranks []int, seq uint64) (Finding, bool) {
	var f Finding
	bySig := map[string][]int{}
	var sigs []string // in rank order, so ties go to the lowest rank
	for _, r := range ranks {
		ro, ok := ops[r]
		e := ro.bySeq[seq]
		switch {
		case !ok:
			continue
		case e == nil && seq >= ro.oldest:
			f.Missing = append(f.Missing, r)
		case e != nil:
			s := signature(e)
			if _, seen := bySig[s]; !seen {
				sigs = append(sigs, s)
			}
			bySig[s] = append(bySig[s], r)
		}
	}
	if len(sigs) == 0 {
		return f, false // no rank still holds it
	}
	major := sigs[0]
	for _, s := range sigs[1:] {
		if len(bySig[s]) > len(bySig[major]) {
			major = s
		}
	}
	for _, s := range sigs {
		if s != major {
			f.Mismatched = append(f.Mismatched, bySig[s]...)
		}
	}
	if len(f.Missing) == 0 && len(f.Mismatched) == 0 {
		return f, false
	}
	slices.Sort(f.Mismatched)
	e := ops[bySig[major][0]].bySeq[seq]
	f.Seq, f.RecordID, f.Op, f.State = seq, e.RecordID, e.ProfilingName, e.State
	f.InputSizes, f.OutputSizes = e.InputSizes, e.OutputSizes
	if len(f.Mismatched) > 0 {
		o := ops[f.Mismatched[0]].bySeq[seq]
		f.Detail = fmt.Sprintf("rank %d issued %s, while ranks %s issued %s",
			f.Mismatched[0], signature(o), setString(bySig[major]), major)
	}
	return f, true
}

// signature is what must be equal on every rank for one collective.
// As torch's analyzer does, it leaves out a gather's output and a
// scatter's input, which only the root has.
func signature(e *Entry) string {
	in, out := fmt.Sprint(e.InputSizes), fmt.Sprint(e.OutputSizes)
	switch e.ProfilingName {
	case "nccl:gather":
		out = "-"
	case "nccl:scatter":
		in = "-"
	}
	return fmt.Sprintf("%s(input_sizes=%s, input_dtypes=%v, output_sizes=%s, output_dtypes=%v)",
		e.ProfilingName, in, e.InputDtypes, out, e.OutputDtypes)
}

// Stalled names, for each group, the collective that every rank with a
// dump waits in while some members left no dump: the last collective of
// each of those ranks is the same one, and none of them saw it complete.
// That is the shape of a hang whose culprit was stopped or killed before
// it could dump (ddp-train's report directory has no flight recorder of a
// stopped rank), which Analyze, comparing only the dumps it has, cannot
// see. The Finding's Missing are the ranks without a dump, and State the
// waiting ranks' (started or scheduled). Groups with every dump, or whose
// ranks are not all stuck on one collective, yield nothing.
func Stalled(dumps map[int]Dump) []Finding {
	var out []Finding
	for _, name := range groupNames(dumps) {
		if f, ok := stalledGroup(dumps, name); ok {
			out = append(out, f)
		}
	}
	return out
}

func stalledGroup(dumps map[int]Dump, name string) (Finding, bool) {
	ranks, desc := members(dumps, name)
	ops, _ := collect(dumps, name, ranks)
	var missing []int
	var last *Entry
	for _, r := range ranks {
		ro, ok := ops[r]
		if !ok {
			missing = append(missing, r)
			continue
		}
		e := ro.newest()
		if e == nil || e.State == "completed" || (last != nil && signature(e) != signature(last)) ||
			(last != nil && e.CollectiveSeqID != last.CollectiveSeqID) {
			return Finding{}, false
		}
		last = e
	}
	if len(missing) == 0 || last == nil {
		return Finding{}, false
	}
	return Finding{Group: name + ":" + desc, Seq: last.CollectiveSeqID, RecordID: last.RecordID, Op: last.ProfilingName,
		Missing: missing, Expected: len(ranks), InputSizes: last.InputSizes, OutputSizes: last.OutputSizes,
		State: last.State}, true
}

// newest is the rank's collective with the highest sequence number.
func (ro rankOps) newest() *Entry {
	var e *Entry
	for seq, x := range ro.bySeq {
		if e == nil || seq > e.CollectiveSeqID {
			e = x
		}
	}
	return e
}
