package arch_test

// Two rules CI holds the whole module to, so that they cannot quietly
// erode: no function outside tests is over maxFuncLines lines or cyclomatic
// complexity maxComplexity, and no package imports one drawn above it in
// the layer table of docs/architecture.md (layers_test.go). Both read every
// non-test .go file of the module, whatever its build tags (mpi, cuda,
// GPU-only files included), with go/parser, since a file the default build
// skips is still code someone maintains.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	// maxFuncLines counts from the func keyword's line to the closing
	// brace's line, both included; the doc comment does not count.
	maxFuncLines = 80
	// maxComplexity is gocyclo's measure (see cyclomatic).
	maxComplexity = 25
)

// funcLimitException excuses one function from both limits. The test fails
// when the function is back within them, or gone, so the table cannot rot:
// delete the row in the change that fixes the function.
type funcLimitException struct {
	file, fn string // slash path from the module root; gocyclo's name: "F", "(T).M", "(*T).M"
	reason   string
}

func funcLimitExceptions() []funcLimitException {
	return []funcLimitException{}
}

// funcStat is one top-level function, method or package-level func literal,
// as gocyclo reports them (a func literal inside a function counts towards
// the function that holds it).
type funcStat struct {
	file       string // slash path from the module root
	line       int
	name       string
	lines      int
	complexity int
}

func (s funcStat) key() string { return s.file + " " + s.name }

func TestFuncLimits(t *testing.T) {
	stats := moduleFuncStats(t)
	excused := map[string]string{}
	for _, e := range funcLimitExceptions() {
		excused[e.file+" "+e.fn] = e.reason
	}
	exists := map[string]bool{}
	for _, s := range stats {
		exists[s.key()] = true
		over := s.lines > maxFuncLines || s.complexity > maxComplexity
		reason, ok := excused[s.key()]
		switch {
		case over && !ok:
			t.Errorf("%s:%d: %s is %d lines (limit %d) with cyclomatic complexity %d (limit %d): "+
				"split it into named steps, or add it to funcLimitExceptions with a reason",
				s.file, s.line, s.name, s.lines, maxFuncLines, s.complexity, maxComplexity)
		case !over && ok:
			t.Errorf("%s:%d: %s is now within the limits (%d lines, complexity %d); "+
				"delete its row in funcLimitExceptions (%q)", s.file, s.line, s.name, s.lines, s.complexity, reason)
		}
	}
	for _, e := range funcLimitExceptions() {
		if !exists[e.file+" "+e.fn] {
			t.Errorf("funcLimitExceptions names %s in %s, which no longer exists; delete the row", e.fn, e.file)
		}
	}
}

// TestFuncLimitsMeasure pins the measures to gocyclo's on a function that
// has every construct gocyclo counts, and some it does not (default clauses,
// a bare else); /tmp/gc/gocyclo says 10 for it.
func TestFuncLimitsMeasure(t *testing.T) {
	const src = `package p

func f(a, b bool, xs []int, ch chan int) int {
	if a && b || !a {
		return 0
	} else {
	}
	for i := 0; i < 2; i++ {
	}
	for range xs {
	}
	switch {
	case a, b:
	case !a:
	default:
	}
	select {
	case <-ch:
	default:
	}
	g := func() bool { return a || b }
	_ = g
	return 1
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := fileFuncStats(fset, "p.go", f)
	want := []funcStat{{file: "p.go", line: 3, name: "f", lines: 22, complexity: 10}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("measured %+v, want %+v", got, want)
	}
}

// moduleFuncStats measures every function in the module's non-test files.
func moduleFuncStats(t *testing.T) []funcStat {
	t.Helper()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var stats []funcStat
	for _, file := range moduleGoFiles(t, root) {
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(file)), nil,
			parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, fileFuncStats(fset, file, f)...)
	}
	return stats
}

// fileFuncStats mirrors gocyclo's walk over a file: every FuncDecl, and
// every func literal assigned by a package-level var or const, named after
// the first name of its spec. A "//gocyclo:ignore" directive is deliberately
// not honoured: the exceptions table is the one place to excuse a function.
func fileFuncStats(fset *token.FileSet, file string, f *ast.File) []funcStat {
	var stats []funcStat
	add := func(n ast.Node, name string) {
		start, end := fset.Position(n.Pos()), fset.Position(n.End())
		stats = append(stats, funcStat{
			file:       file,
			line:       start.Line,
			name:       name,
			lines:      end.Line - start.Line + 1,
			complexity: cyclomatic(n),
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Body != nil { // assembly stubs have no body
				add(d, funcName(d))
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.FuncLit); ok {
						add(lit, vs.Names[0].Name)
					}
				}
			}
		}
	}
	return stats
}

// cyclomatic is github.com/fzipp/gocyclo's complexity (v0.6.0,
// complexity.go): 1, plus one for each if, for, range, case clause other
// than default, select clause other than default, && and ||, counted
// through the whole body, func literals included.
func cyclomatic(fn ast.Node) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName is gocyclo's name for a function: "F", "(T).M" or "(*T).M",
// without type parameters.
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || d.Recv.NumFields() == 0 {
		return d.Name.Name
	}
	return fmt.Sprintf("(%s).%s", recvName(d.Recv.List[0].Type), d.Name.Name)
}

func recvName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return "*" + recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	}
	return "BADRECV"
}

// moduleRoot is the directory of the module's go.mod, found by walking up
// from the test's directory, so that the suite checks the whole module
// wherever in it the suite lives.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("found no go.mod above the test's directory; run the test inside the module")
		}
		dir = parent
	}
}

// moduleGoFiles lists the module's non-test .go files as slash paths from
// the module root, skipping what the go tool skips (testdata, vendor, names
// starting with . or _) and nested modules.
func moduleGoFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("found no .go files under %s", root)
	}
	return files
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}
