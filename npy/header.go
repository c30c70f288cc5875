package npy

import (
	"strconv"
	"strings"
)

// Header limits. A simple array's header is well under 200 bytes; the caps
// keep a corrupt or hostile file from making Read allocate or loop much.
const (
	// MaxHeaderLen is the largest header dictionary Read accepts, in bytes.
	MaxHeaderLen = 1 << 16
	// MaxDims is the largest number of dimensions Read accepts (numpy's
	// own limit is 64 in numpy 2 and 32 before).
	MaxDims = 64
)

// growthAxisMaxDigits is numpy's GROWTH_AXIS_MAX_DIGITS: np.save leaves
// room for the first dimension to grow to 21 digits, so the header can
// be rewritten in place when data is appended.
const growthAxisMaxDigits = 21

// arrayAlign is numpy's ARRAY_ALIGN: magic, length and header together
// are a multiple of 64 bytes.
const arrayAlign = 64

// header is the parsed header dictionary of a .npy file.
type header struct {
	descr   string
	fortran bool
	shape   []int
}

// parser reads the Python dict literal numpy writes, such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
// It knows only the three keys and the value forms numpy uses for simple
// arrays: a string, True or False, and a tuple of non-negative integers.
type parser struct {
	s []byte
	i int
}

// parseHeader parses the header dictionary b.
func parseHeader(b []byte) (header, error) {
	var h header
	p := parser{s: b}
	p.space()
	if !p.eat('{') {
		return h, formatErr("header is not a dictionary like {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }; " +
			"the file is corrupt or not written by numpy")
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, err
		}
		if seen[key] {
			return h, formatErr("header repeats the key %q; the file is corrupt", key)
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return h, p.syntax("':' after a key")
		}
		p.space()
		if err := p.value(key, &h); err != nil {
			return h, err
		}
		p.space()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			break
		}
		return h, p.syntax("',' or '}'")
	}
	p.space()
	if p.i != len(p.s) {
		return h, p.syntax("the end of the header after '}'")
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, formatErr("header lacks the key %q; the file is corrupt or not written by numpy", k)
		}
	}
	return h, nil
}

// value parses the value of key into h.
func (p *parser) value(key string, h *header) error {
	var err error
	switch key {
	case "descr":
		if p.peek() == '[' {
			return formatErr("structured dtypes (records) are not supported; save one plain numeric array per file")
		}
		h.descr, err = p.str()
	case "fortran_order":
		h.fortran, err = p.boolean()
	case "shape":
		h.shape, err = p.tuple()
	default:
		err = formatErr("header has the unknown key %q; only 'descr', 'fortran_order' and 'shape' are allowed", key)
	}
	return err
}

func (p *parser) syntax(want string) error {
	return formatErr("header syntax error at byte %d: want %s; the file is corrupt or not written by numpy", p.i, want)
}

func (p *parser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *parser) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.s) {
		p.i++
		return true
	}
	return false
}

func (p *parser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\n\r\f\v", p.s[p.i]) >= 0 {
		p.i++
	}
}

// str parses a quoted string without escapes, as numpy writes them.
func (p *parser) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", p.syntax("a quoted string")
	}
	start := p.i + 1
	for j := start; j < len(p.s); j++ {
		switch p.s[j] {
		case q:
			p.i = j + 1
			return string(p.s[start:j]), nil
		case '\\', '\n':
			p.i = j
			return "", p.syntax("a plain string (no escapes or line breaks)")
		}
	}
	p.i = len(p.s)
	return "", p.syntax("a closing quote")
}

// boolean parses True or False.
func (p *parser) boolean() (bool, error) {
	for _, w := range []string{"True", "False"} {
		end := p.i + len(w)
		if end <= len(p.s) && string(p.s[p.i:end]) == w && !isIdent(p.at(end)) {
			p.i = end
			return w == "True", nil
		}
	}
	return false, p.syntax("True or False for 'fortran_order'")
}

func (p *parser) at(i int) byte {
	if i < len(p.s) {
		return p.s[i]
	}
	return 0
}

func isIdent(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// tuple parses a tuple of dimensions: (), (n,), (n, m) or (n, m,).
func (p *parser) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, p.syntax("a tuple such as (3, 4) for 'shape'")
	}
	shape := []int{}
	for {
		p.space()
		if p.eat(')') {
			return shape, nil
		}
		if len(shape) == MaxDims {
			return nil, formatErr("shape has more than %d dimensions; reshape the array", MaxDims)
		}
		d, err := p.dim()
		if err != nil {
			return nil, err
		}
		shape = append(shape, d)
		p.space()
		if p.eat(',') {
			continue
		}
		if p.eat(')') {
			if len(shape) == 1 {
				return nil, formatErr("shape (n) is an integer, not a tuple; a one-dimensional shape is written (n,)")
			}
			return shape, nil
		}
		return nil, p.syntax("',' or ')' in 'shape'")
	}
}

// dim parses a non-negative decimal integer, allowing the L suffix that
// Python 2 wrote after long integers.
func (p *parser) dim() (int, error) {
	if p.peek() == '-' {
		return 0, formatErr("shape has a negative dimension; the file is corrupt")
	}
	start, v := p.i, 0
	for ; p.i < len(p.s) && '0' <= p.s[p.i] && p.s[p.i] <= '9'; p.i++ {
		d := int(p.s[p.i] - '0')
		if v > (maxInt-d)/10 {
			return 0, formatErr("shape has a dimension too large for this machine; the file is corrupt")
		}
		v = v*10 + d
	}
	if p.i == start {
		return 0, p.syntax("a non-negative integer dimension")
	}
	if c := p.peek(); c == 'L' || c == 'l' {
		p.i++
	}
	if c := p.peek(); isIdent(c) || c == '.' {
		return 0, p.syntax("a non-negative integer dimension")
	}
	return v, nil
}

// formatHeader returns the magic, version, header length and header
// dictionary exactly as numpy's np.save writes them for a C-order array
// with at most MaxDims dimensions.
func formatHeader(descr string, shape []int) []byte {
	var d strings.Builder
	d.WriteString("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + pyTuple(shape) + ", }")
	if len(shape) > 0 {
		d.WriteString(strings.Repeat(" ", max(0, growthAxisMaxDigits-len(strconv.Itoa(shape[0])))))
	}
	hlen := d.Len() + 1      // the final '\n'
	prefix := len(magic) + 4 // magic, version 1.0, uint16 length
	pad := arrayAlign - (prefix+hlen)%arrayAlign
	total := hlen + pad // fits in uint16: Write allows at most MaxDims dimensions

	out := make([]byte, 0, prefix+total)
	out = append(out, magic...)
	out = append(out, 1, 0, byte(total), byte(total>>8))
	out = append(out, d.String()...)
	out = append(out, strings.Repeat(" ", pad)...)
	return append(out, '\n')
}

// pyTuple formats shape as Python's repr of a tuple.
func pyTuple(shape []int) string {
	parts := make([]string, len(shape))
	for i, n := range shape {
		parts[i] = strconv.Itoa(n)
	}
	if len(shape) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
