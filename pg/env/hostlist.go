package env

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds what ExpandHostlist produces, as Slurm bounds a range
// (64K hosts): a longer list is an error, not an allocation.
const MaxHosts = 1 << 16

// ExpandHostlist expands a Slurm hostlist expression, as in
// SLURM_JOB_NODELIST, into host names in order:
//
//	node[01-04,07]        node01 node02 node03 node04 node07
//	a1,b[2-3]             a1 b2 b3
//	gpu[8-10]             gpu8 gpu9 gpu10 (the width of the range's start is kept)
//	rack[1-2]-node[01-02] rack1-node01 rack1-node02 rack2-node01 rack2-node02
//	n[1-2].ib             n1.ib n2.ib
//
// Hosts are separated by commas, spaces or tabs outside brackets; inside
// brackets a comma separates ranges, so it never splits a host. Each
// bracket group holds ranges "lo-hi" or numbers, and the zero padding of
// "lo" is kept. With several groups in one host the leftmost varies
// slowest, as in Slurm. Host names hold letters, digits, '-', '.' and
// '_'. Anything else (an empty or unclosed group, a range that runs
// backwards, a backslash, nested brackets, an empty list) is an error
// that quotes the offending part, and no host names are returned.
func ExpandHostlist(s string) ([]string, error) {
	var hosts []string
	for item, err := range splitHostlist(s) {
		if err == nil {
			hosts, err = expandHost(hosts, item)
		}
		if err != nil {
			return nil, hostlistError(s, err)
		}
	}
	if len(hosts) == 0 {
		return nil, hostlistError(s, errors.New("no host names"))
	}
	return hosts, nil
}

func hostlistError(s string, err error) error {
	return fmt.Errorf("hostlist %q: %w", s, err)
}

// splitHostlist yields the hosts expressions of s, split at separators
// outside brackets; empty items (",," or a trailing comma) are skipped,
// as Slurm does.
func splitHostlist(s string) func(yield func(string, error) bool) {
	return func(yield func(string, error) bool) {
		depth, start := 0, 0
		for i := 0; i <= len(s); i++ {
			if i < len(s) {
				switch s[i] {
				case '[':
					if depth > 0 {
						yield("", fmt.Errorf("nested '[' at offset %d", i))
						return
					}
					depth++
					continue
				case ']':
					if depth == 0 {
						yield("", fmt.Errorf("']' without '[' at offset %d", i))
						return
					}
					depth--
					continue
				case ',', ' ', '\t', '\n':
					if depth > 0 {
						if s[i] != ',' {
							yield("", fmt.Errorf("white space inside brackets at offset %d", i))
							return
						}
						continue
					}
				default:
					continue
				}
			} else if depth > 0 {
				yield("", fmt.Errorf("'[' not closed"))
				return
			}
			if item := s[start:i]; item != "" {
				if !yield(item, nil) {
					return
				}
			}
			start = i + 1
		}
	}
}

// expandHost appends the hosts of one expression, such as
// "rack[1-2]-node[01-02]", to hosts.
func expandHost(hosts []string, expr string) ([]string, error) {
	open := strings.IndexByte(expr, '[')
	if open < 0 {
		if err := checkHostText(expr); err != nil {
			return nil, err
		}
		if len(hosts) >= MaxHosts {
			return nil, fmt.Errorf("more than %d hosts", MaxHosts)
		}
		return append(hosts, expr), nil
	}
	prefix := expr[:open]
	if err := checkHostText(prefix); err != nil {
		return nil, err
	}
	end := strings.IndexByte(expr[open:], ']') + open // splitHostlist checked it is there
	rest := expr[end+1:]
	group := expr[open+1 : end]
	if group == "" {
		return nil, fmt.Errorf("empty brackets in %q", expr)
	}
	for _, r := range strings.Split(group, ",") {
		lo, hi, width, err := parseRange(r)
		if err != nil {
			return nil, err
		}
		if hi-lo >= MaxHosts {
			return nil, fmt.Errorf("range %q: more than %d hosts", r, MaxHosts)
		}
		for n := lo; n <= hi; n++ {
			if hosts, err = expandHost(hosts, fmt.Sprintf("%s%0*d%s", prefix, width, n, rest)); err != nil {
				return nil, err
			}
		}
	}
	return hosts, nil
}

// parseRange reads "lo-hi" or "n"; width is the number of digits of lo,
// the zero padding every number of the range gets.
func parseRange(r string) (lo, hi uint64, width int, err error) {
	loText, hiText, isRange := strings.Cut(r, "-")
	if lo, err = parseIndex(loText); err != nil {
		return 0, 0, 0, fmt.Errorf("range %q: %w", r, err)
	}
	hi = lo
	if isRange {
		if hi, err = parseIndex(hiText); err != nil {
			return 0, 0, 0, fmt.Errorf("range %q: %w", r, err)
		}
		if hi < lo {
			return 0, 0, 0, fmt.Errorf("range %q runs backwards", r)
		}
	}
	return lo, hi, len(loText), nil
}

func parseIndex(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("a number is missing")
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	if len(s) > 9 {
		return 0, fmt.Errorf("%q is too long a number", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

// checkHostText checks the text between bracket groups.
func checkHostText(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_':
		case c == '\\':
			return fmt.Errorf("%q: a backslash is not part of a host name (commas inside brackets need no escaping)", s)
		default:
			return fmt.Errorf("%q: %q is not allowed in a host name", s, c)
		}
	}
	return nil
}
