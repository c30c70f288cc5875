package main

// Note [every rank runs the same job]
//
// Ranks that an external launcher starts (torchrun, srun, a Kubernetes
// JobSet) each parse their own command line, and nothing but the
// launcher's care makes those the same. Ranks that differ in --steps end
// apart (rank 0 says "done" and exits 0 while rank 1 waits for it and
// fails), in --lr or the optimizer drift apart until the replica check
// fails at step 10, and in --log-every or --check-replicas-every issue
// different collectives. So at start-up, once the group has formed and
// before anything else runs on it, every rank compares its settings with
// every other's (agreeSettings):
//
//   - The settings are every flag's value, after --epochs has resolved
//     --steps (Note [no flag is ignored]), except those that only say
//     where this process reads, writes, listens or logs (localFlags), plus
//     the training set as loaded (samples, shape, classes: its digest
//     would read the whole set, and the model check and the replica check
//     catch what the shape does not). --checkpoint is compared as given
//     or not, since its path may differ from machine to machine while a
//     checkpoint is collective.
//   - One allgather of three words per rank (the settings' length and a
//     128-bit digest) decides, on the inner group, before pg/desync's
//     fingerprints (--debug-collectives is itself a setting to compare).
//     Only when the digests differ does a second allgather bring every
//     rank's settings, padded to the longest, so that every rank names
//     the same differences: the setting, the values and the ranks holding
//     each. Every rank then exits 2 with that line.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/pg"
)

// localFlags are the flags that may differ from rank to rank: where this
// process reads, writes, listens and logs, how it is launched, and how
// long it waits (Note [every rank runs the same job]).
var localFlags = []string{
	"data", "labels", "init", "save", "summary", "timeline", "flight-dir", "checkpoint",
	"metrics-addr", "debug-addr", "listen-addr", "log-format", "log-level", "timeout", "version",
	"nproc", "oversubscribe", "max-restarts", "restart-backoff", "nnodes", "node-rank", "master-addr", "master-port",
	"overwrite-checkpoints", "resume-allow-changes",
}

// maxNamedRanks is how many ranks a mismatch lists per value.
const maxNamedRanks = 8

// jobSettings are the settings every rank must share, as "name=value"
// lines sorted by name; flags (flag name to value) are every flag's.
func jobSettings(flags map[string]string, checkpointGiven bool, ds *dataset.Dataset) []string {
	var out []string
	for name, v := range flags {
		if !slices.Contains(localFlags, name) {
			out = append(out, "--"+name+"="+strconv.Quote(v))
		}
	}
	out = append(out, "--checkpoint (given)="+strconv.FormatBool(checkpointGiven),
		fmt.Sprintf("the training set=%q", fmt.Sprintf("%d samples of shape %v, %d classes", ds.N, ds.Shape, ds.Classes)))
	slices.Sort(out)
	return out
}

// agreeSettings checks that every rank of g holds the settings mine
// (Note [every rank runs the same job]). Collective; a difference is a
// usage error naming it, the same on every rank.
func agreeSettings(ctx context.Context, g pg.ProcessGroup, mine []string) error {
	blob := []byte(strings.Join(mine, "\n"))
	sum := sha256.Sum256(blob)
	head := []int64{int64(len(blob)), int64(binary.LittleEndian.Uint64(sum[:8])),
		int64(binary.LittleEndian.Uint64(sum[8:16]))}
	heads := make([]int64, 3*g.Size())
	if err := g.AllGather(ctx, pg.Int64s(heads), pg.Int64s(head)).Wait(ctx); err != nil {
		return fmt.Errorf("comparing the ranks' settings: %w", err)
	}
	longest, same := 0, true
	for r := range g.Size() {
		longest = max(longest, int(heads[3*r]))
		same = same && slices.Equal(heads[3*r:3*r+3], heads[:3])
	}
	if same {
		return nil
	}
	words := (longest + 7) / 8
	buf := make([]byte, 8*words)
	copy(buf, blob)
	all := make([]int64, words*g.Size())
	if err := g.AllGather(ctx, pg.Int64s(all), pg.Int64s(bytesToWords(buf))).Wait(ctx); err != nil {
		return fmt.Errorf("gathering the ranks' settings, which differ: %w", err)
	}
	ranks := make([][]string, g.Size())
	for r := range ranks {
		b := wordsToBytes(all[r*words : (r+1)*words])
		ranks[r] = strings.Split(string(b[:heads[3*r]]), "\n")
	}
	return settingsMismatch(ranks)
}

func bytesToWords(b []byte) []int64 {
	w := make([]int64, len(b)/8)
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return w
}

func wordsToBytes(w []int64) []byte {
	b := make([]byte, 0, 8*len(w))
	for _, x := range w {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// settingsMismatch names every setting on which the ranks' settings
// differ: "--steps is 100 on rank 0 but 200 on rank 1".
func settingsMismatch(ranks [][]string) error {
	values := make([]map[string]string, len(ranks)) // per rank: name to value
	var names []string
	for r, lines := range ranks {
		values[r] = map[string]string{}
		for _, l := range lines {
			name, v, _ := strings.Cut(l, "=")
			values[r][name] = v
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	var diffs []string
	for _, name := range names {
		if d := describeDiff(name, values); d != "" {
			diffs = append(diffs, d)
		}
	}
	if len(diffs) == 0 { // the digests differed but the settings did not: say so rather than nothing
		diffs = []string{"their settings' digests differ"}
	}
	return usagef("the ranks were started with different settings: %s; start every rank with the same flags (only "+
		"paths, addresses, logging and --timeout may differ)", strings.Join(diffs, "; "))
}

// describeDiff describes how the ranks differ on one setting, or "".
func describeDiff(name string, values []map[string]string) string {
	var order []string            // the values, in the order of the first rank holding each
	holders := map[string][]int{} // value to ranks
	for r, v := range values {
		val, ok := v[name]
		if !ok {
			val = "(not set: another version of ddp-train?)"
		}
		if _, seen := holders[val]; !seen {
			order = append(order, val)
		}
		holders[val] = append(holders[val], r)
	}
	if len(order) < 2 {
		return ""
	}
	parts := make([]string, len(order))
	for i, val := range order {
		parts[i] = shown(val) + " on " + rankList(holders[val])
	}
	return name + " is " + strings.Join(parts, " but ")
}

// shown is a quoted value as the user typed it, unless quotes are needed
// to see it (empty, or with spaces).
func shown(quoted string) string {
	v, err := strconv.Unquote(quoted)
	if err != nil || v == "" || strings.ContainsAny(v, " \t\n") {
		return quoted
	}
	return v
}

// rankList is "rank 1" or "ranks 1, 2, 3" (at most maxNamedRanks, then
// how many more).
func rankList(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	s := make([]string, 0, maxNamedRanks+1)
	for _, r := range rs[:min(len(rs), maxNamedRanks)] {
		s = append(s, strconv.Itoa(r))
	}
	if len(rs) > maxNamedRanks {
		s = append(s, fmt.Sprintf("and %d more", len(rs)-maxNamedRanks))
	}
	return "ranks " + strings.Join(s, ", ")
}
