package flight

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ReadDir reads every rank's dump in dir: the files named prefix
// followed by a rank (DefaultPrefix when prefix is empty), as torch's
// analyzer finds them. Other files are skipped.
func ReadDir(dir, prefix string) (map[int]Dump, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("flight: %w", err)
	}
	out := make(map[int]Dump)
	for _, de := range names {
		rank, err := strconv.Atoi(strings.TrimPrefix(de.Name(), prefix))
		if de.IsDir() || !strings.HasPrefix(de.Name(), prefix) || err != nil || rank < 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			return nil, fmt.Errorf("flight: %w", err)
		}
		var d Dump
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("flight: %s is not a JSON flight-recorder dump: %w", de.Name(), err)
		}
		out[rank] = d
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("flight: no dumps named %s<rank> in %s", prefix, dir)
	}
	return out, nil
}

// Finding is the first collective of a group where the ranks' dumps
// disagree, as torch's analyzer reports it.
type Finding struct {
	Group    string // the group's name and description, "name:desc"
	Seq      uint64 // collective_seq_id
	RecordID uint64 // the entry's record_id on the first rank that has it
	Op       string // profiling_name on the ranks that agree
	// Missing are the ranks that never issued the collective (their
	// recorder lacks it); Mismatched those that issued a different one
	// (another op, sizes or dtypes) than the most ranks did. Global
	// ranks, ascending.
	Missing, Mismatched []int
	Expected            int     // how many ranks the group has
	InputSizes          [][]int // on the ranks that agree
	OutputSizes         [][]int
	State               string // on the ranks that agree
	Detail              string // what differs, for a mismatch
}

// String prints f as torch's analyzer logs it.
func (f Finding) String() string { return f.format(-1) }

// Brief is String with every list of ranks cut to its first max and
// every other field to 8·max bytes, each cut saying how much it left out:
// its size is bounded whatever the dumps hold (a hostile or damaged dump
// can name any number of ranks, sizes and bytes).
func (f Finding) Brief(max int) string { return f.format(max) }

// format is String with lists cut at limit (no cut when negative).
func (f Finding) format(limit int) string {
	text := func(s string) string { return cut(s, 8*limit) }
	var b strings.Builder
	if len(f.Missing) > 0 {
		fmt.Fprintf(&b, "Not all ranks joining collective %d at entry %d\n", f.Seq, f.RecordID)
	} else {
		fmt.Fprintf(&b, "Collective %d at entry %d does not match across ranks\n", f.Seq, f.RecordID)
	}
	fmt.Fprintf(&b, "group info: %s\ncollective: %s\n", text(f.Group), text(f.Op))
	if len(f.Missing) > 0 {
		fmt.Fprintf(&b, "missing ranks: %s\n", setStringN(f.Missing, limit))
	}
	if len(f.Mismatched) > 0 {
		fmt.Fprintf(&b, "mismatched ranks: %s\n%s\n", setStringN(f.Mismatched, limit), text(f.Detail))
	}
	fmt.Fprintf(&b, "input sizes: %s\noutput sizes: %s\nexpected ranks: %d\ncollective state: %s\n",
		text(fmt.Sprint(f.InputSizes)), text(fmt.Sprint(f.OutputSizes)), f.Expected, text(f.State))
	return b.String()
}

// setString prints ranks as Python prints a set, "{1, 2}".
func setString(ranks []int) string {
	s := ranksString(ranks)
	return "{" + s[1:len(s)-1] + "}"
}

// setStringN is setString of the first n ranks, and how many more
// there are: "{1, 2, ... 7 more}". A negative n cuts nothing.
func setStringN(ranks []int, n int) string {
	switch {
	case n < 0 || len(ranks) <= n:
		return setString(ranks)
	case n == 0:
		return fmt.Sprintf("{%d ranks}", len(ranks))
	}
	s := ranksString(ranks[:n])
	return fmt.Sprintf("{%s, ... %d more}", s[1:len(s)-1], len(ranks)-n)
}

// cut is s cut to about n bytes (on a character's boundary), saying how
// many it left out. A negative n cuts nothing.
func cut(s string, n int) string {
	if n < 0 || len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:n], len(s)-n)
}

// Analyze compares the ranks' dumps and returns, for each group, the
// first collective where some ranks never arrived or issued something
// else, in the order of the groups' names. Point-to-point operations
// are not matched, and ranks without a dump are left out. A collective
// older than a rank's oldest entry (its ring overwrote it) is not held
// against that rank.
func Analyze(dumps map[int]Dump) []Finding {
	var out []Finding
	for _, name := range groupNames(dumps) {
		if f, ok := analyzeGroup(dumps, name); ok {
			out = append(out, f)
		}
	}
	return out
}

// MissingDumps are the ranks that some dump's pg_config lists as
// members of a group but that left no dump: a rank killed, or stopped
// (SIGSTOP), before it could write one. Analyze leaves them out.
func MissingDumps(dumps map[int]Dump) []int {
	var out []int
	for _, name := range groupNames(dumps) {
		ranks, _ := members(dumps, name)
		for _, r := range ranks {
			if _, ok := dumps[r]; !ok && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	slices.Sort(out)
	return out
}

// groupNames are every group in any rank's pg_config, sorted.
func groupNames(dumps map[int]Dump) []string {
	var names []string
	for _, d := range dumps {
		for n := range d.PgConfig {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

// members are the global ranks of group name: its pg_config ranks, or,
// when a dump does not know them, the ranks whose dumps have the group.
func members(dumps map[int]Dump, name string) ([]int, string) {
	var ranks []int
	desc := ""
	for r, d := range dumps {
		c, ok := d.PgConfig[name]
		if !ok {
			continue
		}
		desc = c.Desc
		var listed []int
		if json.Unmarshal([]byte(c.Ranks), &listed) == nil && len(listed) > 0 {
			return listed, desc
		}
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	return ranks, desc
}
