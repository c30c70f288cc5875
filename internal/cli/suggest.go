package cli

import (
	"flag"
	"strings"
)

// Suggest returns the defined flag of fs nearest to the unknown name, or
// "" when none is near. A flag is near when its name is a few edits
// away, or when the words of name are a few edits from the first words
// of its usage: --lerning-rate finds --lr, whose usage is "learning
// rate". The limit is a third of the length of name, so a short typo
// does not match everything (and one of one or two letters matches
// nothing); a swap of two neighbouring letters counts as one edit.
func Suggest(fs *flag.FlagSet, name string) string {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	limit := len([]rune(name)) / 3
	if limit == 0 {
		return ""
	}
	words := strings.Fields(strings.NewReplacer("-", " ", "_", " ").Replace(name))
	best, bestD := "", limit+1
	fs.VisitAll(func(f *flag.Flag) {
		d := distance(name, strings.ToLower(f.Name))
		if u := strings.Fields(strings.ToLower(f.Usage)); len(u) >= len(words) {
			for k := range words {
				u[k] = strings.Trim(u[k], ":,;.()")
			}
			d = min(d, distance(strings.Join(words, " "), strings.Join(u[:len(words)], " ")))
		}
		if d < bestD { // VisitAll goes in name order: ties keep the first
			best, bestD = f.Name, d
		}
	})
	return best
}

// distance is the edit distance between a and b, in runes: insertions,
// deletions, substitutions and swaps of neighbours (the optimal string
// alignment distance), since a swap is the commonest typo.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// rows[i%3] is row i of the table; a swap looks two rows back.
	rows := [3][]int{make([]int, len(rb)+1), make([]int, len(rb)+1), make([]int, len(rb)+1)}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur, prev, prev2 := rows[i%3], rows[(i-1)%3], rows[(i+1)%3]
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
	}
	return rows[len(ra)%3][len(rb)]
}
