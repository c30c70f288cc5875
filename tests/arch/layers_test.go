package arch_test

import (
	"go/parser"
	"go/token"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

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
	// engine is whether the layer's packages may import an autodiff engine
	// (Gorgonia or GoMLX, see engineOf): the reducer and everything below
	// it know no autodiff engine, so that any engine can drive them. A
	// library package imports one engine at most (checkOneEngine).
	engine bool
	line   int // the row's line in docs/architecture.md
}

// short is the layer's name up to its first colon, semicolon or parenthesis, for
// messages.
func (l layer) short() string {
	if i := strings.IndexAny(l.name, ":;("); i > 0 {
		return strings.TrimSpace(l.name[:i])
	}
	return l.name
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
	return []layerViolation{}
}

// modulePackages is what the layer checks read of the module's non-test
// files: each package directory's imports and package name.
type modulePackages struct {
	modPath string
	imports map[string][]string // directory from the module root → import paths, sorted
	names   map[string]string   // directory → package name
}

// modDirs keeps the module's packages among dir's imports, as directories
// from the module root.
func (m modulePackages) modDirs(dir string) []string {
	var dirs []string
	for _, p := range m.imports[dir] {
		switch {
		case p == m.modPath:
			dirs = append(dirs, ".")
		case strings.HasPrefix(p, m.modPath+"/"):
			dirs = append(dirs, strings.TrimPrefix(p, m.modPath+"/"))
		}
	}
	return dirs
}

func (m modulePackages) pkgPath(dir string) string {
	if dir == "." {
		return m.modPath
	}
	return m.modPath + "/" + dir
}

// knownEdges tracks which of knownLayerViolations the checks met.
type knownEdges map[[2]string]bool

func newKnownEdges() knownEdges {
	k := knownEdges{}
	for _, v := range knownLayerViolations() {
		k[[2]string{v.from, v.to}] = false
	}
	return k
}

// excuse reports whether from → to is a known violation, and marks it met.
func (k knownEdges) excuse(from, to string) bool {
	e := [2]string{from, to}
	if _, ok := k[e]; !ok {
		return false
	}
	k[e] = true
	return true
}

func TestLayers(t *testing.T) {
	root := moduleRoot(t)
	m := scanModule(t, root)
	table := readLayerTable(t, root)
	checkLayerTable(t, table, m)
	checkEngineFree(t, table, m)
	checkOneEngine(t, table, m)

	known := newKnownEdges()
	for _, from := range sortedKeys(m.imports) {
		fl, ok := layerOf(table, from)
		if !ok {
			t.Errorf("package %s is in no layer of the table in %s; place it there", m.pkgPath(from), layerTableDoc)
			continue
		}
		for _, to := range m.modDirs(from) {
			tl, ok := layerOf(table, to)
			if !ok || tl <= fl || known.excuse(from, to) {
				continue // an unplaced package is reported once, above
			}
			t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s), which is drawn above it",
				m.pkgPath(from), fl, table[fl].short(), m.pkgPath(to), tl, table[tl].short())
		}
	}
	checkLeaves(t, table, m, known)
	for _, v := range knownLayerViolations() {
		if !known[[2]string{v.from, v.to}] {
			t.Errorf("knownLayerViolations lists %s importing %s (%s), which no longer breaks the layering; "+
				"delete the row", m.pkgPath(v.from), m.pkgPath(v.to), v.reason)
		}
	}
}

// TestFolders fails where the folders disagree with the layers: internal/
// holds layer 0 and nothing else, and a package's name is its directory's
// and no other package's.
func TestFolders(t *testing.T) {
	root := moduleRoot(t)
	m := scanModule(t, root)
	table := readLayerTable(t, root)
	for _, dir := range sortedKeys(m.imports) {
		l, ok := layerOf(table, dir)
		if ok && l != 0 && underInternal(dir) {
			t.Errorf("%s is under internal/, which holds the leaf helpers (layer 0) only, but %s:%d places it in "+
				"layer %d (%s); move it beside the packages that use it", m.pkgPath(dir), layerTableDoc, table[l].line,
				l, table[l].short())
		}
	}
	if len(table) > 0 {
		for _, p := range table[0].pkgs {
			if !underInternal(strings.TrimSuffix(p, "/...")) && strings.HasSuffix(p, "/...") {
				t.Errorf("%s:%d: layer 0 places the public tree %q among the leaf helpers; list each public leaf by "+
					"its exact path, or move the tree under internal/", layerTableDoc, table[0].line, p)
			}
		}
	}
	checkNames(t, m)
}

func underInternal(dir string) bool {
	return dir == "internal" || strings.HasPrefix(dir, "internal/")
}

// checkLeaves fails for a package of layer 0 that imports a package of the
// module: the leaf helpers are leaves, which is what lets any package use
// them.
func checkLeaves(t *testing.T, table []layer, m modulePackages, known knownEdges) {
	t.Helper()
	for _, dir := range sortedKeys(m.imports) {
		if l, ok := layerOf(table, dir); !ok || l != 0 {
			continue
		}
		for _, to := range m.modDirs(dir) {
			if _, placed := layerOf(table, to); placed && !known.excuse(dir, to) {
				t.Errorf("%s is a leaf helper (layer 0, %s) but imports %s of the module; leaf helpers import only "+
					"the standard library and other modules", m.pkgPath(dir), table[0].short(), m.pkgPath(to))
			}
		}
	}
}

// checkNames fails for two packages of one name (programs, all named
// main, aside) and for a package named other than its directory: an import
// path's last element is then the name the importer writes.
func checkNames(t *testing.T, m modulePackages) {
	t.Helper()
	byName := map[string][]string{}
	for _, dir := range sortedKeys(m.names) {
		name := m.names[dir]
		if name == "main" {
			continue
		}
		byName[name] = append(byName[name], dir)
		if dir != "." && path.Base(dir) != name {
			t.Errorf("%s is package %s; name the directory after the package (or the package after it)",
				m.pkgPath(dir), name)
		}
	}
	for _, name := range sortedKeys(byName) {
		if dirs := byName[name]; len(dirs) > 1 {
			t.Errorf("packages %v are all named %s; one package per name: rename all but one", dirs, name)
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
func checkEngineFree(t *testing.T, table []layer, m modulePackages) {
	t.Helper()
	for _, dir := range sortedKeys(m.imports) {
		l, ok := layerOf(table, dir)
		if !ok || table[l].engine {
			continue
		}
		for _, p := range m.imports[dir] {
			if e := engineOf(p); e != "" {
				t.Errorf("%s (layer %d, %s) imports %s (%s), but the engine-free layers (the reducer and below) "+
					"know no autodiff engine", m.pkgPath(dir), l, table[l].short(), p, e)
			}
		}
	}
}

// checkOneEngine fails for a library package (any layer but the
// programs, the table's last) that imports two autodiff engines: an
// engine's glue must not drag the other engine into its users' binaries.
func checkOneEngine(t *testing.T, table []layer, m modulePackages) {
	t.Helper()
	for _, dir := range sortedKeys(m.imports) {
		l, ok := layerOf(table, dir)
		if !ok || l == len(table)-1 { // the programs may offer several engines
			continue
		}
		engines := map[string]string{}
		for _, p := range m.imports[dir] {
			if e := engineOf(p); e != "" {
				engines[e] = p
			}
		}
		if len(engines) > 1 {
			t.Errorf("%s (layer %d, %s) imports two autodiff engines (%v); a library package drives one engine",
				m.pkgPath(dir), l, table[l].short(), engines)
		}
	}
}

// checkLayerTable fails for a pattern listed twice or matching no package.
func checkLayerTable(t *testing.T, table []layer, m modulePackages) {
	t.Helper()
	where := map[string]layer{}
	for _, l := range table {
		for _, p := range l.pkgs {
			if other, ok := where[p]; ok {
				t.Errorf("%s:%d: %q is listed in layer %q too (line %d)", layerTableDoc, l.line, p, other.short(), other.line)
			}
			where[p] = l
			if !patternMatchesAny(p, m.imports) {
				t.Errorf("%s:%d: %q (layer %q) matches no package; re-home or delete it", layerTableDoc, l.line, p, l.short())
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

// scanModule reads, for each package directory (from the module root) that
// has non-test files, the import paths of those files, whatever their
// build tags, and the package's name.
func scanModule(t *testing.T, root string) modulePackages {
	t.Helper()
	fset := token.NewFileSet()
	sets := map[string]map[string]bool{}
	m := modulePackages{modPath: modulePath(t, root), imports: map[string][]string{}, names: map[string]string{}}
	for _, file := range moduleGoFiles(t, root) {
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(file)), nil, parser.ImportsOnly)
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
		if name, ok := m.names[dir]; ok && name != f.Name.Name {
			t.Errorf("%s is package %s, but other files of %s are package %s", file, f.Name.Name, dir, name)
		}
		m.names[dir] = f.Name.Name
	}
	for dir, set := range sets {
		m.imports[dir] = sortedKeys(set)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
