package arch_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// linesMax is the longest a line of a .go file may be, in runes, a tab
// counting one. Past it a line no longer fits a side-by-side diff or a
// review pane, and it is mostly a comment paragraph or an error message
// that reads better broken: comments rewrapped at spaces, strings split
// into "..." + "...", code broken after a comma.
const linesMax = 120

// TestLineLength holds every .go file of the module, tests and build-tagged
// files included, to linesMax, except a table row (a comment line whose
// text starts with '|'), a line holding a URL, which cannot be broken, and
// the lines of an Example's Output block, which must equal what the
// example prints (a message a user sees on one line) byte for byte.
// linesFixer is the tool that breaks most long lines mechanically.
const linesFixer = "cd scripts/wrap120 && go run . ../.. does comments, strings and most code"

func TestLineLength(t *testing.T) {
	root := moduleRoot(t)
	files := linesGoFiles(t, root)
	n := 0
	for _, f := range files {
		for _, o := range linesOver(t, f) {
			rel, _ := filepath.Rel(root, f)
			t.Errorf("%s:%d: %d characters (limit %d); break it (%s)",
				filepath.ToSlash(rel), o.line, o.length, linesMax, linesFixer)
			n++
		}
	}
	if n > 0 {
		t.Logf("%d lines over %d characters", n, linesMax)
	}
}

// TestLineLengthRule checks the rule itself on lines it must pass and fail.
func TestLineLengthRule(t *testing.T) {
	long := strings.Repeat("x", linesMax+1)
	for _, c := range []struct {
		line string
		over bool
	}{
		{strings.Repeat("x", linesMax), false},
		{"\t" + strings.Repeat("x", linesMax-1), false},
		{strings.Repeat("é", linesMax), false}, // runes, not bytes
		{long, true},
		{"\t// " + long, true},
		{"\t// | a table row " + long, false},
		{"//| a table row " + long, false},
		{"// see https://example.com/" + long, false},
		{`s := "http://` + long + `"`, false},
		{"\t//\t" + long, true}, // a code block in a comment is no table
	} {
		if got := linesIsOver(c.line); got != c.over {
			t.Errorf("linesIsOver(%q) = %v, want %v", c.line, got, c.over)
		}
	}
}

type linesOffender struct{ line, length int }

// linesOpensOutput reports whether a trimmed line opens an Example's Output block.
func linesOpensOutput(t string) bool {
	rest, ok := strings.CutPrefix(t, "//")
	rest = strings.TrimSpace(rest)
	return ok && (strings.HasPrefix(rest, "Output:") || strings.HasPrefix(rest, "Unordered output:"))
}

// linesIsOver reports whether a line breaks the rule.
func linesIsOver(l string) bool {
	if utf8.RuneCountInString(l) <= linesMax {
		return false
	}
	if strings.Contains(l, "http://") || strings.Contains(l, "https://") {
		return false
	}
	if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "//"); ok && strings.HasPrefix(strings.TrimSpace(rest), "|") {
		return false
	}
	return true
}

func linesOver(t *testing.T, path string) []linesOffender {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []linesOffender
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 16<<20)
	inOutput := false
	for i := 1; s.Scan(); i++ {
		l := s.Text()
		if strings.HasSuffix(path, "_test.go") {
			t := strings.TrimSpace(l)
			inOutput = linesOpensOutput(t) || (inOutput && strings.HasPrefix(t, "//"))
			if inOutput {
				continue
			}
		}
		if linesIsOver(l) {
			out = append(out, linesOffender{i, utf8.RuneCountInString(l)})
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// linesGoFiles lists every .go file under root, tests, testdata and nested
// modules (the examples a user copies) included; only directories whose
// names start with . or _ and vendor are skipped, as by the go tool.
func linesGoFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d .go files under %s; is that the module root?", len(files), root)
	}
	return files
}
