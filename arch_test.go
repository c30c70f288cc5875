package ddp_test

// Two rules of issue 22 that CI holds the whole module to, so that they
// cannot quietly erode: no function outside tests is over maxFuncLines lines
// or cyclomatic complexity maxComplexity, and no package imports one drawn
// above it in layerTable. Both read every non-test .go file of the module,
// whatever its build tags (mpi, cuda, GPU-only files included), with
// go/parser, since a file the default build skips is still code someone
// maintains.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
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
			t.Errorf("%s:%d: %s is %d lines (limit %d) with cyclomatic complexity %d (limit %d): split it into named steps, "+
				"or add it to funcLimitExceptions with a reason",
				s.file, s.line, s.name, s.lines, maxFuncLines, s.complexity, maxComplexity)
		case !over && ok:
			t.Errorf("%s:%d: %s is now within the limits (%d lines, complexity %d); delete its row in funcLimitExceptions (%q)",
				s.file, s.line, s.name, s.lines, s.complexity, reason)
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
	fset := token.NewFileSet()
	var stats []funcStat
	for _, file := range moduleGoFiles(t) {
		f, err := parser.ParseFile(fset, filepath.FromSlash(file), nil, parser.ParseComments|parser.SkipObjectResolution)
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

// moduleGoFiles lists the module's non-test .go files as slash paths from
// the module root (this test's directory), skipping what the go tool skips
// (testdata, vendor, names starting with . or _) and nested modules.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == "." {
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
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("found no .go files; the test must run in the module root")
	}
	return files
}

// A layer is a set of packages that may import each other and anything in
// a lower layer, never a higher one.
type layer struct {
	name string
	// pkgs are directories from the module root: "." is the root package,
	// "pg" only pg itself, "pg/tcp/..." pg/tcp and everything under it.
	// An exact path beats a "/..." pattern, and a longer pattern a shorter
	// one, so that a package moved or added under a placed tree lands with
	// its parent, and one placed nowhere fails the test until it is placed.
	pkgs []string
	// gorgonia is whether the layer's packages may import an autodiff
	// engine (Gorgonia or GoMLX, see engineOf): the reducer and everything
	// below it know no autodiff engine (docs/architecture.md), so that any
	// engine can drive them. A library package imports one engine at most
	// (checkOneEngine).
	gorgonia bool
}

// layerTable draws the module's packages from the bottom up, after
// docs/architecture.md. To move a package, edit its pattern; a pattern that
// matches no package fails the test, so a rename cannot leave a stale row.
func layerTable() []layer {
	const engineFree, gorgonia = false, true
	return []layer{
		{"leaf helpers: kernels, bounds, the NCCL/CUDA binding, log and trace formats, the scaling model", []string{
			"internal/base/...", "nccl", "logger", "timeline", "bench/scale/model",
		}, engineFree},
		{"the process-group interface", []string{"pg"}, engineFree},
		{"what backends share: reduction kernels, the wire format", []string{"pg/internal/..."}, engineFree},
		{"rendezvous: stores and launcher conventions", []string{"pg/store/...", "pg/env/..."}, engineFree},
		{"backends, group wrappers, the conformance suite", []string{
			"pg/local/...", "pg/tcp/...", "pg/mpi/...", "pg/nccl/...",
			"pg/desync/...", "pg/instrument/...", "pg/flight/...", "pg/pgtest/...",
		}, engineFree},
		{"engine-free DDP parts: buckets and comm hooks", []string{"bucket/...", "commhook/..."}, engineFree},
		{"the reducer", []string{"reducer/..."}, engineFree},
		{"GoMLX engine: data-parallel GoMLX training over the reducer", []string{"engines/gomlxddp/..."}, gorgonia},
		{"Gorgonia glue: gradient-ready hooks, Gorgonia values as pg.Tensor", []string{"autogradhooks/...", "gtensor/..."},
			gorgonia},
		{"training packages", []string{
			"averaging/...", "optim/...", "checkpoint/...", "sampler/...", "dataset/...", "npy/...",
		}, gorgonia},
		{"the front door, package ddp", []string{"."}, gorgonia},
		{"wiring: the launcher, test worlds, the model zoo", []string{
			"internal/wiring/...",
		}, gorgonia},
		{"programs", []string{"cmd/...", "bench/...", "examples/..."}, gorgonia},
	}
}

// layerViolation is an import that breaks the layering today, listed so
// that it is known rather than allowed: the test fails for any violation not
// listed, and for a listed one that is gone, so that its row goes with the
// fix.
type layerViolation struct {
	from, to string // directories from the module root
	reason   string
}

func knownLayerViolations() []layerViolation {
	return []layerViolation{} // none since issue 22 (optim imported the root for TensorOf)
}

func TestLayers(t *testing.T) {
	modPath := modulePath(t)
	all := moduleImports(t)
	imports := map[string][]string{}
	for dir, paths := range all {
		imports[dir] = moduleDirs(modPath, paths)
	}
	table := layerTable()
	checkLayerTable(t, table, imports)
	checkEngineFree(t, modPath, table, all)
	checkOneEngine(t, modPath, table, all)

	known := map[[2]string]bool{}
	for _, v := range knownLayerViolations() {
		known[[2]string{v.from, v.to}] = false
	}
	for _, from := range sortedKeys(imports) {
		fl, ok := layerOf(table, from)
		if !ok {
			t.Errorf("package %s is in no layer of layerTable; place it there (arch_test.go)", pkgPath(modPath, from))
			continue
		}
		for _, to := range imports[from] {
			tl, ok := layerOf(table, to)
			if !ok || tl <= fl {
				continue // an unplaced package is reported once, above
			}
			edge := [2]string{from, to}
			if _, ok := known[edge]; ok {
				known[edge] = true
				continue
			}
			t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s), which is drawn above it",
				pkgPath(modPath, from), fl, table[fl].name, pkgPath(modPath, to), tl, table[tl].name)
		}
	}
	for _, v := range knownLayerViolations() {
		if !known[[2]string{v.from, v.to}] {
			t.Errorf("knownLayerViolations lists %s importing %s (%s), which no longer breaks the layering; delete the row",
				pkgPath(modPath, v.from), pkgPath(modPath, v.to), v.reason)
		}
	}
}

// engineOf names the autodiff engine an import path belongs to, "" for
// none.
func engineOf(importPath string) string {
	for prefix, engine := range map[string]string{"gorgonia.org": "Gorgonia", "github.com/gomlx": "GoMLX"} {
		if importPath == prefix || strings.HasPrefix(importPath, prefix+"/") {
			return engine
		}
	}
	return ""
}

// checkEngineFree fails for a package of a layer drawn below the engine
// line that imports an autodiff engine (Gorgonia or GoMLX).
func checkEngineFree(t *testing.T, modPath string, table []layer, all map[string][]string) {
	t.Helper()
	for _, dir := range sortedKeys(all) {
		l, ok := layerOf(table, dir)
		if !ok || table[l].gorgonia {
			continue
		}
		for _, p := range all[dir] {
			if e := engineOf(p); e != "" {
				t.Errorf("%s (layer %d, %s) imports %s (%s), but the layers marked engineFree (the reducer and below) know no "+
					"autodiff engine", pkgPath(modPath, dir), l, table[l].name, p, e)
			}
		}
	}
}

// checkOneEngine fails for a library package (any layer but the
// programs) that imports two autodiff engines: an engine's glue must not
// drag the other engine into its users' binaries.
func checkOneEngine(t *testing.T, modPath string, table []layer, all map[string][]string) {
	t.Helper()
	for _, dir := range sortedKeys(all) {
		l, ok := layerOf(table, dir)
		if !ok || l == len(table)-1 { // the programs may offer several engines
			continue
		}
		engines := map[string]string{}
		for _, p := range all[dir] {
			if e := engineOf(p); e != "" {
				engines[e] = p
			}
		}
		if len(engines) > 1 {
			t.Errorf("%s (layer %d, %s) imports two autodiff engines (%v); a library package drives one engine",
				pkgPath(modPath, dir), l, table[l].name, engines)
		}
	}
}

// checkLayerTable fails for a pattern listed twice or matching no package.
func checkLayerTable(t *testing.T, table []layer, imports map[string][]string) {
	t.Helper()
	where := map[string]string{}
	for _, l := range table {
		for _, p := range l.pkgs {
			if other, ok := where[p]; ok {
				t.Errorf("layerTable lists %q in both %q and %q", p, other, l.name)
			}
			where[p] = l.name
			if !patternMatchesAny(p, imports) {
				t.Errorf("layerTable's %q (layer %q) matches no package; re-home or delete it", p, l.name)
			}
		}
	}
}

func patternMatchesAny(pattern string, pkgs map[string][]string) bool {
	for dir := range pkgs {
		if _, ok := matchPattern(pattern, dir); ok {
			return true
		}
	}
	return false
}

// layerOf returns the index of dir's layer, by its most specific pattern.
func layerOf(table []layer, dir string) (int, bool) {
	best, bestScore := -1, -1
	for i, l := range table {
		for _, p := range l.pkgs {
			if score, ok := matchPattern(p, dir); ok && score > bestScore {
				best, bestScore = i, score
			}
		}
	}
	return best, best >= 0
}

// matchPattern reports whether pattern places dir, and how specifically: an
// exact path scores above every "/..." pattern, a longer pattern above a
// shorter one.
func matchPattern(pattern, dir string) (int, bool) {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		if dir == tree || strings.HasPrefix(dir, tree+"/") {
			return len(tree), true
		}
		return 0, false
	}
	if dir == pattern {
		return 1 << 20, true
	}
	return 0, false
}

// moduleImports maps each package directory (from the module root) that has
// non-test files to the import paths of those files, whatever their build
// tags.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	sets := map[string]map[string]bool{}
	for _, file := range moduleGoFiles(t) {
		f, err := parser.ParseFile(fset, filepath.FromSlash(file), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		dir := path.Dir(file)
		if sets[dir] == nil {
			sets[dir] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			sets[dir][strings.Trim(imp.Path.Value, `"`)] = true
		}
	}
	imports := map[string][]string{}
	for dir, set := range sets {
		imports[dir] = sortedKeys(set)
	}
	return imports
}

// moduleDirs keeps the module's packages among paths, as directories from
// the module root.
func moduleDirs(modPath string, paths []string) []string {
	var dirs []string
	for _, p := range paths {
		switch {
		case p == modPath:
			dirs = append(dirs, ".")
		case strings.HasPrefix(p, modPath+"/"):
			dirs = append(dirs, strings.TrimPrefix(p, modPath+"/"))
		}
	}
	return dirs
}

func modulePath(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("go.mod")
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

func pkgPath(modPath, dir string) string {
	if dir == "." {
		return modPath
	}
	return modPath + "/" + dir
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
