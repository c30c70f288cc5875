// Command wrap120 rewrites the .go files of a tree so that no line is over 120 characters, outside tables
// and URLs, and formats each file it changes with gofmt. It is idempotent: a second run changes nothing.
//
//	go run . [-n] [-v] DIR...
//
// A line's length is its count of runes, a tab counting one. Exempt, as tests/arch's TestLineLength has it:
// a line holding http:// or https://, a comment line whose text starts with '|' (a table row), and the
// lines of an Example's Output block (never edited: they must equal what the example prints).
//
// What it does, in order, pass after pass until nothing changes:
//   - a long // comment line is rewrapped at spaces: the overflow moves into the next line of the same
//     paragraph (or list item), or into a new line with the same prefix, so only the tail of a paragraph
//     changes. Lines indented with a tab after // (code blocks), other indented blocks that do not
//     continue a list item, directives (//go:...), cgo preambles, Example Output blocks and /* */
//     comments are left alone, and a line is never broken so that the next begins like a list item,
//     a heading or a table;
//   - a code line with a trailing // comment moves the comment to a line of its own above the code;
//   - a string literal crossing column 120 is moved whole onto the next line where it fits there, or else
//     split at a space into "..." + "..." (a raw one into `...` + `...`: the value is the same), unless it
//     is a struct tag, an import path, or indexed or sliced; a line inside a multi-line raw string is
//     split the same way, closing the literal after a space and opening a new one on the next line;
//   - any other long code line is broken after a comma (inside parentheses, brackets, a composite literal
//     or a case list), && or || that leaves the first line within 120, the shallowest such, the rightmost
//     of those; else a literal on it is split; else it is broken after an opening parenthesis, = or :=.
//
// What remains (long identifiers, raw strings, lines with no break point) it lists; fix those by hand.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

const maxLen = 120

func main() {
	dry := flag.Bool("n", false, "report what would change; write nothing")
	verbose := flag.Bool("v", false, "list every long line that remains")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: wrap120 [-n] [-v] DIR...")
		os.Exit(2)
	}
	var changed, remaining, failed int
	for _, root := range flag.Args() {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "vendor") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out, err := fixFile(src)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v (left as it was)\n", path, err)
				failed++
			}
			if !bytes.Equal(out, src) {
				changed++
				if !*dry {
					if err := os.WriteFile(path, out, 0o644); err != nil {
						return err
					}
				}
			}
			inOutput := false
			for i, l := range strings.Split(string(out), "\n") {
				t := strings.TrimSpace(l)
				inOutput = outputRE.MatchString(t) || (inOutput && strings.HasPrefix(t, "//"))
				if !inOutput && isLong(l) {
					remaining++
					if *verbose {
						fmt.Printf("%s:%d: %d characters\n", path, i+1, lineLen(l))
					}
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "wrap120: %d files changed, %d long lines remain, %d files failed\n",
		changed, remaining, failed)
	if failed > 0 {
		os.Exit(1)
	}
}

func lineLen(s string) int { return utf8.RuneCountInString(s) }

// isLong reports whether line is over the limit and not exempt.
func isLong(line string) bool {
	if lineLen(line) <= maxLen {
		return false
	}
	if strings.Contains(line, "http://") || strings.Contains(line, "https://") {
		return false
	}
	t := strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(t, "//"); ok && strings.HasPrefix(strings.TrimSpace(rest), "|") {
		return false
	}
	return true
}

// fixFile runs passes until one changes nothing. On an error it returns src unchanged.
func fixFile(src []byte) ([]byte, error) {
	orig := src
	for pass := 0; pass < 200; pass++ {
		out, changed, err := onePass(src)
		if err != nil {
			return orig, err
		}
		if !changed {
			return src, nil
		}
		formatted, err := format.Source(out)
		if err != nil {
			return orig, fmt.Errorf("pass %d made a file gofmt refuses: %v", pass, err)
		}
		if bytes.Equal(formatted, src) {
			return src, nil
		}
		src = formatted
	}
	return src, nil
}

type tok struct {
	start, end int // byte offsets in the line
	kind       token.Token
	splittable bool // an interpreted string literal that may become "..." + "..."
}

// brk is a place a newline may go: after byte off, at bracket depth depth.
type brk struct{ off, depth int }

type line struct {
	text        string
	fullComment bool // the line is one // comment and nothing else
	frozen      bool // never edited, never joined into
	trailing    int  // byte offset of a trailing // comment, or -1
	toks        []tok
	breaks      []brk // where a newline may go: after commas, && and ||
	weakBreaks  []brk // after an opening parenthesis
	lastBreaks  []brk // after = and :=
	rawEnd      int   // inside a multi-line raw string that may be split: where its content ends; else -1
}

func onePass(src []byte) ([]byte, bool, error) {
	lines, err := analyze(src)
	if err != nil {
		return nil, false, err
	}
	changed := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !isLong(l.text) {
			continue
		}
		var ok bool
		switch {
		case l.rawEnd >= 0:
			lines, ok = splitRawLine(lines, i)
		case l.frozen:
		case l.fullComment:
			lines, ok = reflowComment(lines, i)
		default:
			lines, ok = fixCode(lines, i)
		}
		changed = changed || ok
	}
	if !changed {
		return src, false, nil
	}
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.text)
	}
	return []byte(b.String()), true, nil
}

// analyze splits src into lines and notes, for each, what may be edited and where.
func analyze(src []byte) ([]line, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	texts := strings.Split(string(src), "\n")
	lines := make([]line, len(texts))
	starts := make([]int, len(texts)) // byte offset of each line in src
	off := 0
	for i, t := range texts {
		lines[i] = line{text: t, trailing: -1, rawEnd: -1}
		starts[i] = off
		off += len(t) + 1
	}
	tf := fset.File(f.Pos())
	lineOf := func(p token.Pos) int { return tf.Line(p) - 1 }
	freeze := func(from, to token.Pos) {
		for i := lineOf(from); i <= lineOf(to) && i < len(lines); i++ {
			lines[i].frozen = true
		}
	}
	splittable, composite, cases := literalContexts(f)
	markComments(f, tf, lines, starts, freeze)

	var s scanner.Scanner
	s.Init(tf, src, nil, scanner.ScanComments)
	type open struct {
		kind token.Token
		lit  bool // a composite literal's brace
	}
	var stack []open
	prevParen := -1 // line and offset of the last '(' not yet followed by a token
	var prevParenOff int
	for {
		pos, t, lit := s.Scan()
		if t == token.EOF {
			break
		}
		if t == token.SEMICOLON && lit == "\n" {
			continue
		}
		p := tf.Offset(pos)
		li := lineOf(pos)
		col := p - starts[li]
		if prevParen >= 0 {
			if t != token.RPAREN && prevParen == li {
				lines[li].weakBreaks = append(lines[li].weakBreaks, brk{prevParenOff, len(stack) - 1})
			}
			prevParen = -1
		}
		switch t {
		case token.COMMENT:
			if strings.HasPrefix(lit, "/*") {
				freeze(pos, pos+token.Pos(len(lit)))
			}
			continue
		case token.STRING, token.CHAR:
			if strings.Contains(lit, "\n") {
				freeze(pos, pos+token.Pos(len(lit)))
				if t == token.STRING && splittable[pos] {
					last := lineOf(pos + token.Pos(len(lit)-1))
					for k := li + 1; k <= last; k++ {
						lines[k].rawEnd = len(lines[k].text)
					}
					lines[last].rawEnd = tf.Offset(pos) + len(lit) - 1 - starts[last]
				}
				continue
			}
			lines[li].toks = append(lines[li].toks, tok{start: col, end: col + len(lit), kind: t,
				splittable: splittable[pos]})
			continue
		case token.LPAREN, token.LBRACK:
			stack = append(stack, open{kind: t})
			if t == token.LPAREN {
				prevParen, prevParenOff = li, col+1
			}
		case token.LBRACE:
			stack = append(stack, open{kind: t, lit: composite[pos]})
		case token.RPAREN, token.RBRACK, token.RBRACE:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case token.COMMA:
			if n := len(stack); n > 0 && (stack[n-1].kind != token.LBRACE || stack[n-1].lit || inCase(cases, pos)) {
				lines[li].breaks = append(lines[li].breaks, brk{col + 1, n})
			}
		case token.ASSIGN, token.DEFINE:
			lines[li].lastBreaks = append(lines[li].lastBreaks, brk{col + len(t.String()), len(stack)})
		case token.LAND, token.LOR:
			lines[li].breaks = append(lines[li].breaks, brk{col + 2, len(stack)})
		}
		end := col + len(lit)
		if lit == "" {
			end = col + len(t.String())
		}
		lines[li].toks = append(lines[li].toks, tok{start: col, end: end, kind: t})
	}
	return lines, nil
}

// inCase reports whether pos lies in a case clause's list of expressions.
func inCase(cases [][2]token.Pos, pos token.Pos) bool {
	for _, c := range cases {
		if c[0] < pos && pos < c[1] {
			return true
		}
	}
	return false
}

// literalContexts returns the string literals that may be split, the braces of composite literals and the
// spans of case clauses' lists.
func literalContexts(f *ast.File) (map[token.Pos]bool, map[token.Pos]bool, [][2]token.Pos) {
	var cases [][2]token.Pos
	splittable := map[token.Pos]bool{}
	composite := map[token.Pos]bool{}
	deny := map[token.Pos]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind == token.STRING && !deny[n.Pos()] {
				splittable[n.Pos()] = true
			}
		case *ast.CompositeLit:
			composite[n.Lbrace] = true
		case *ast.CaseClause:
			cases = append(cases, [2]token.Pos{n.Case, n.Colon})
		case *ast.Field:
			if n.Tag != nil {
				deny[n.Tag.Pos()] = true
			}
		case *ast.ImportSpec:
			deny[n.Path.Pos()] = true
		case *ast.IndexExpr:
			deny[n.X.Pos()] = true
		case *ast.SliceExpr:
			deny[n.X.Pos()] = true
		case *ast.SelectorExpr:
			deny[n.X.Pos()] = true
		}
		return true
	})
	return splittable, composite, cases
}

var outputRE = regexp.MustCompile(`^//\s*(Unordered output|Output):`)

// markComments notes the full-line and trailing // comments and freezes what must not change: cgo
// preambles and Example Output blocks.
func markComments(f *ast.File, tf *token.File, lines []line, starts []int, freeze func(from, to token.Pos)) {
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		for _, sp := range g.Specs {
			is := sp.(*ast.ImportSpec)
			if is.Path.Value == `"C"` {
				if g.Doc != nil {
					freeze(g.Doc.Pos(), g.Doc.End())
				}
				if is.Doc != nil {
					freeze(is.Doc.Pos(), is.Doc.End())
				}
			}
		}
	}
	for _, cg := range f.Comments {
		inOutput := false
		for _, c := range cg.List {
			li := tf.Line(c.Pos()) - 1
			if !strings.HasPrefix(c.Text, "//") {
				continue
			}
			if outputRE.MatchString(c.Text) {
				inOutput = true
			}
			if inOutput {
				lines[li].frozen = true
				continue
			}
			col := tf.Offset(c.Pos()) - starts[li]
			if strings.TrimSpace(lines[li].text[:col]) == "" {
				lines[li].fullComment = true
			} else {
				lines[li].trailing = col
			}
		}
	}
}

var (
	listRE    = regexp.MustCompile(`^( +)([-*+•]|[0-9]+[.)]) +`)
	markerRE  = regexp.MustCompile(`^([-*+•]|[0-9]+[.)]|#|\|)( |$)`)
	indentRE  = regexp.MustCompile(`^[ \t]*`)
	contentRE = regexp.MustCompile(`^ ( *)\S`)
)

// commentShape returns a comment line's first prefix (up to its text) and the prefix its continuation
// lines carry, or ok false when the line is not prose that may be rewrapped.
func commentShape(lines []line, i int) (first, cont string, ok bool) {
	t := lines[i].text
	indent := indentRE.FindString(t)
	rest := strings.TrimPrefix(t[len(indent):], "//")
	if !strings.HasPrefix(rest, " ") {
		return "", "", false // a directive, a tab-indented code block, or an empty line
	}
	if m := listRE.FindStringSubmatch(rest); m != nil {
		return indent + "//" + m[0], indent + "//" + strings.Repeat(" ", lineLen(m[0])), true
	}
	m := contentRE.FindStringSubmatch(rest)
	if m == nil {
		return "", "", false
	}
	if m[1] == "" {
		return indent + "// ", indent + "// ", true
	}
	// Indented further: prose only as the continuation of a list item above it.
	p := indent + "//" + " " + m[1]
	for j := i - 1; j >= 0 && lines[j].fullComment; j-- {
		f, c, ok := commentShape(lines, j)
		if !ok {
			return "", "", false
		}
		if c == p && f != c {
			return p, p, true
		}
		if c != p {
			return "", "", false
		}
	}
	return "", "", false
}

// split breaks text at the last space that keeps prefix+text[:k] within the limit and does not leave the
// rest starting like a list marker, heading or table row. It returns ok false when there is none.
func split(prefix, text string) (head, tail string, ok bool) {
	room := maxLen - lineLen(prefix)
	for k := len(text) - 1; k > 0; k-- {
		if text[k] != ' ' || lineLen(text[:k]) > room {
			continue
		}
		h, t := strings.TrimRight(text[:k], " "), strings.TrimLeft(text[k:], " ")
		if h == "" || t == "" || markerRE.MatchString(t) {
			continue
		}
		return h, t, true
	}
	return "", "", false
}

func reflowComment(lines []line, i int) ([]line, bool) {
	first, cont, ok := commentShape(lines, i)
	if !ok {
		return lines, false
	}
	text := strings.TrimPrefix(lines[i].text, first)
	head, carry, ok := split(first, text)
	if !ok {
		return lines, false
	}
	lines[i].text = first + head
	for j := i + 1; carry != ""; j++ {
		if j < len(lines) && lines[j].fullComment && !lines[j].frozen && isNextInParagraph(lines[j].text, cont) {
			cur := carry + " " + strings.TrimPrefix(lines[j].text, cont)
			if lineLen(cont+cur) <= maxLen {
				lines[j].text = cont + cur
				return lines, true
			}
			h, t, ok := split(cont, cur)
			if !ok {
				lines[j].text = cont + cur
				return lines, true
			}
			lines[j].text, carry = cont+h, t
			continue
		}
		nl := line{text: cont + carry, fullComment: true, trailing: -1}
		carry = ""
		if isLong(nl.text) {
			if h, t, ok := split(cont, strings.TrimPrefix(nl.text, cont)); ok {
				nl.text, carry = cont+h, t
			}
		}
		lines = append(lines[:j], append([]line{nl}, lines[j:]...)...)
	}
	return lines, true
}

// isNextInParagraph reports whether a comment line continues the paragraph whose lines start with cont.
func isNextInParagraph(t, cont string) bool {
	rest, ok := strings.CutPrefix(t, cont)
	if !ok || rest == "" || rest[0] == ' ' || rest[0] == '\t' {
		return false
	}
	if strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
		return false
	}
	return !markerRE.MatchString(rest)
}

func fixCode(lines []line, i int) ([]line, bool) {
	l := lines[i]
	indent := indentRE.FindString(l.text)
	if c := l.trailing; c >= 0 && len(l.text) > c+2 && (l.text[c+2] == ' ' || l.text[c+2] == '\t') {
		code := strings.TrimRight(l.text[:c], " \t")
		comment := line{text: indent + l.text[c:], fullComment: true, trailing: -1}
		lines[i].text, lines[i].trailing = code, -1
		return append(lines[:i], append([]line{comment}, lines[i:]...)...), true
	}
	// The token holding column maxLen+1.
	for _, t := range l.toks {
		if lineLen(l.text[:t.end]) <= maxLen || lineLen(l.text[:t.start]) > maxLen {
			continue
		}
		if !t.splittable {
			break
		}
		// Better a whole literal on the next line than one cut in two, where it fits there.
		for _, bs := range [][]brk{l.breaks, l.weakBreaks} {
			if bp := bestBreak(l.text, bs, indent, t.start); bp > 0 &&
				lineLen(indent)+1+lineLen(strings.TrimLeft(l.text[bp:t.end], " ")) <= maxLen-2 {
				return breakAt(lines, i, bp, indent), true
			}
		}
		if out, ok := splitString(lines, i, t, indent); ok {
			return out, true
		}
		break
	}
	if bp := bestBreak(l.text, l.breaks, indent, len(l.text)); bp > 0 {
		return breakAt(lines, i, bp, indent), true
	}
	for k := len(l.toks) - 1; k >= 0; k-- {
		if t := l.toks[k]; t.splittable && lineLen(l.text[:t.start]) < maxLen-8 {
			if out, ok := splitString(lines, i, t, indent); ok {
				return out, true
			}
		}
	}
	for _, bs := range [][]brk{l.weakBreaks, l.lastBreaks} {
		if bp := bestBreak(l.text, bs, indent, len(l.text)); bp > 0 {
			return breakAt(lines, i, bp, indent), true
		}
	}
	return lines, false
}

// splitRawLine splits a line inside a multi-line raw string after its last space that keeps "` +" within the
// limit: the string becomes two raw strings joined by +, with the same value.
func splitRawLine(lines []line, i int) ([]line, bool) {
	text, end := lines[i].text, lines[i].rawEnd
	for k := end - 2; k > 0; k-- {
		if text[k] != ' ' || lineLen(text[:k+1])+3 > maxLen {
			continue
		}
		lines[i].text = text[:k+1] + "` +"
		nl := line{text: "`" + text[k+1:], trailing: -1, rawEnd: -1, frozen: true}
		return append(lines[:i+1], append([]line{nl}, lines[i+1:]...)...), true
	}
	return lines, false
}

// bestBreak returns the break at or before limit that leaves the first line within the limit, at the
// shallowest bracket depth, the rightmost of those; 0 if there is none.
func bestBreak(text string, breaks []brk, indent string, limit int) int {
	best, depth := 0, -1
	for _, b := range breaks {
		if b.off > limit {
			continue
		}
		head := strings.TrimRight(text[:b.off], " \t")
		if lineLen(head) > maxLen || lineLen(head)-lineLen(indent) < 10 || strings.TrimSpace(text[b.off:]) == "" {
			continue
		}
		if depth < 0 || b.depth < depth || (b.depth == depth && b.off > best) {
			best, depth = b.off, b.depth
		}
	}
	return best
}

func breakAt(lines []line, i, bp int, indent string) []line {
	t := lines[i].text
	lines[i].text = strings.TrimRight(t[:bp], " \t")
	nl := line{text: indent + "\t" + strings.TrimLeft(t[bp:], " \t"), trailing: -1}
	return append(lines[:i+1], append([]line{nl}, lines[i+1:]...)...)
}

// splitString splits the literal t of line i after the last space that keeps `..." +` within the limit.
func splitString(lines []line, i int, t tok, indent string) ([]line, bool) {
	text := lines[i].text
	lit := text[t.start:t.end]
	q := lit[:1] // " or `
	room := maxLen - lineLen(text[:t.start]) - len(`" +`)
	for k := len(lit) - 2; k > 1; k-- { // lit[k] is the last byte of the first part
		if lit[k] != ' ' || lineLen(lit[:k+1]) > room {
			continue
		}
		if q == `"` && escaped(lit, k) {
			continue
		}
		head := text[:t.start] + lit[:k+1] + q + " +"
		tail := indent + "\t" + q + lit[k+1:] + text[t.end:]
		lines[i].text = head
		nl := line{text: tail, trailing: -1}
		return append(lines[:i+1], append([]line{nl}, lines[i+1:]...)...), true
	}
	return lines, false
}

// escaped reports whether the byte at k of an interpreted literal is part of an escape sequence (a space
// never is, but an octal or \x escape's digits could sit before it; splitting after k must leave whole
// escapes on each side, which holds when the run of backslashes before k+1 is even).
func escaped(lit string, k int) bool {
	n := 0
	for j := k - 1; j >= 0 && lit[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}
