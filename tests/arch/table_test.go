package arch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// layerTableDoc holds the layer table, from the module root: the page a
// newcomer reads is the rule CI enforces.
const layerTableDoc = "docs/architecture.md"

// layerTableHeader is the table's header row, cell by cell.
func layerTableHeader() []string {
	return []string{"layer", "what it holds", "packages", "may import an engine"}
}

// isLayerPattern reports whether p is a package pattern: "." (the module
// root), a directory from it ("pg"), or a tree ("pg/tcp/...").
func isLayerPattern(p string) bool {
	return regexp.MustCompile(`^(\.|[a-z0-9_]+(/[a-z0-9_]+)*(/\.\.\.)?)$`).MatchString(p)
}

// readLayerTable parses the layer table of docs/architecture.md, and fails
// the test, naming the line, if it is malformed.
func readLayerTable(t *testing.T, root string) []layer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(layerTableDoc)))
	if err != nil {
		t.Fatal(err)
	}
	table, err := parseLayerTable(string(data))
	if err != nil {
		t.Fatalf("%s:%v", layerTableDoc, err)
	}
	return table
}

// parseLayerTable reads the first table under the "## Layers" heading:
// the header row (layerTableHeader), the delimiter row, then one row per
// layer from the bottom up, numbered 0, 1, 2 ...; the packages cell lists
// patterns, each in backticks, separated by commas; the last cell is "yes"
// or "no", and every "no" layer lies below every "yes" one (the engine
// line). Errors start with the line number, from 1.
func parseLayerTable(doc string) ([]layer, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "## Layers" {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf(`1: no "## Layers" heading (the layer table lives under it)`)
	}
	for start < len(lines) && !strings.HasPrefix(lines[start], "|") {
		if strings.HasPrefix(lines[start], "## ") {
			return nil, fmt.Errorf(`%d: the "## Layers" section ends without a table`, start+1)
		}
		start++
	}
	end := start
	for end < len(lines) && strings.HasPrefix(lines[end], "|") {
		end++
	}
	if end-start < 3 {
		return nil, fmt.Errorf(`%d: the "## Layers" section has no table of a header, a delimiter and rows`, start+1)
	}
	if err := checkHeader(lines[start], lines[start+1], start+1); err != nil {
		return nil, err
	}
	var table []layer
	for i := start + 2; i < end; i++ {
		l, err := parseLayerRow(lines[i], i+1, len(table))
		if err != nil {
			return nil, err
		}
		if len(table) > 0 && table[len(table)-1].engine && !l.engine {
			return nil, fmt.Errorf("%d: layer %d is engine-free but lies above layer %d, which may import an engine; "+
				"the engine-free layers are the bottom ones", i+1, len(table), len(table)-1)
		}
		table = append(table, l)
	}
	return table, nil
}

func checkHeader(header, delimiter string, line int) error {
	cells := tableCells(header)
	if len(cells) != len(layerTableHeader()) {
		return fmt.Errorf("%d: the header has %d cells, want %d: %s", line, len(cells), len(layerTableHeader()),
			strings.Join(layerTableHeader(), " | "))
	}
	for i, c := range cells {
		if !strings.EqualFold(c, layerTableHeader()[i]) {
			return fmt.Errorf("%d: header cell %d is %q, want %q", line, i+1, c, layerTableHeader()[i])
		}
	}
	delims := tableCells(delimiter)
	for _, c := range delims {
		if strings.Trim(c, ":-") != "" || !strings.Contains(c, "-") {
			return fmt.Errorf("%d: %q is not a delimiter row", line+1, delimiter)
		}
	}
	if len(delims) != len(layerTableHeader()) {
		return fmt.Errorf("%d: the delimiter row has %d cells, want %d", line+1, len(delims), len(layerTableHeader()))
	}
	return nil
}

// parseLayerRow reads the row of layer n.
func parseLayerRow(row string, line, n int) (layer, error) {
	cells := tableCells(row)
	if len(cells) != len(layerTableHeader()) {
		return layer{}, fmt.Errorf("%d: the row has %d cells, want %d (%s)", line, len(cells), len(layerTableHeader()),
			strings.Join(layerTableHeader(), " | "))
	}
	if cells[0] != strconv.Itoa(n) {
		return layer{}, fmt.Errorf("%d: the layer is numbered %q, want %d (rows go from the bottom up, from 0)",
			line, cells[0], n)
	}
	l := layer{name: cells[1], line: line}
	if l.name == "" {
		return layer{}, fmt.Errorf("%d: layer %d says nothing of what it holds", line, n)
	}
	for _, item := range strings.Split(cells[2], ",") {
		item = strings.TrimSpace(item)
		p, opened := strings.CutPrefix(item, "`")
		p, closed := strings.CutSuffix(p, "`")
		if !opened || !closed || !isLayerPattern(p) {
			return layer{}, fmt.Errorf("%d: %q is not a package pattern in backticks (`.`, `pg`, `pg/tcp/...`); "+
				"say what a package is in the second cell", line, item)
		}
		l.pkgs = append(l.pkgs, p)
	}
	switch cells[3] {
	case "yes":
		l.engine = true
	case "no":
	default:
		return layer{}, fmt.Errorf(`%d: whether layer %d may import an engine is %q, want "yes" or "no"`, line, n, cells[3])
	}
	return l, nil
}

// tableCells splits a markdown table row into its trimmed cells.
func tableCells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	cells := strings.Split(row, "|")
	for i, c := range cells {
		cells[i] = strings.TrimSpace(c)
	}
	return cells
}

// The layer table is a markdown table in docs/architecture.md, read from
// the bottom up.
func Example_parseLayerTable() {
	table, err := parseLayerTable(`# Architecture

## Layers

| layer | what it holds | packages | may import an engine |
|---|---|---|---|
| 0 | leaf helpers | ` + "`internal/...`, `logger`" + ` | no |
| 1 | the interface | ` + "`pg`" + ` | no |
| 2 | programs | ` + "`cmd/...`" + ` | yes |
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, l := range table {
		fmt.Println(i, l.name, l.pkgs, l.engine, "line", l.line)
	}
	// Output:
	// 0 leaf helpers [internal/... logger] false line 7
	// 1 the interface [pg] false line 8
	// 2 programs [cmd/...] true line 9
}

func TestParseLayerTableRefusesMalformed(t *testing.T) {
	const head = "## Layers\n\n| layer | what it holds | packages | may import an engine |\n|---|---|---|---|\n"
	for _, c := range []struct{ name, doc, want string }{
		{"no heading", "# x\n| a |\n", `no "## Layers" heading`},
		{"no table", "## Layers\n\ntext\n\n## Next\n", "ends without a table"},
		{"header only", "## Layers\n| layer | what it holds | packages | may import an engine |\n|---|---|---|---|\n",
			"no table of a header"},
		{"wrong header", "## Layers\n| layer | packages |\n|---|---|\n| 0 | `pg` |\n", "header has 2 cells"},
		{"renamed header", "## Layers\n| layer | what | packages | engine |\n|---|---|---|---|\n| 0 | x | `pg` | no |\n",
			`header cell 2 is "what"`},
		{"no delimiter", "## Layers\n| layer | what it holds | packages | may import an engine |\n| 0 | x | `pg` | no |\n" +
			"| 1 | y | `cmd` | yes |\n", "not a delimiter row"},
		{"cells", head + "| 0 | x | `pg` |\n", "row has 3 cells"},
		{"numbering", head + "| 0 | x | `pg` | no |\n| 2 | y | `cmd/...` | yes |\n", `numbered "2", want 1`},
		{"empty name", head + "| 0 |  | `pg` | no |\n", "says nothing"},
		{"bare pattern", head + "| 0 | x | pg | no |\n", `"pg" is not a package pattern`},
		{"half quoted", head + "| 0 | x | pg` | no |\n", "is not a package pattern"},
		{"prose pattern", head + "| 0 | x | `pg` (the interface) | no |\n", "is not a package pattern"},
		{"bad pattern", head + "| 0 | x | `pg/` | no |\n", "is not a package pattern"},
		{"engine cell", head + "| 0 | x | `pg` | maybe |\n", `want "yes" or "no"`},
		{"engine line", head + "| 0 | x | `pg` | yes |\n| 1 | y | `cmd/...` | no |\n", "engine-free layers are the bottom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseLayerTable(c.doc)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestPatternsAgainstFolders: the checks that read the table against the
// tree fail as they should, on a made-up module.
func TestPatternsAgainstFolders(t *testing.T) {
	table := []layer{{name: "leaves", pkgs: []string{"internal/...", "logger"}}, {name: "pg", pkgs: []string{"pg/..."}},
		{name: "programs", pkgs: []string{"cmd/...", "pg/tool"}, engine: true}}
	for _, c := range []struct {
		dir  string
		want int
	}{{"internal/vec", 0}, {"logger", 0}, {"pg", 1}, {"pg/tcp/internal/shm", 1}, {"pg/tool", 2}, {"cmd/x", 2}} {
		if got, ok := layerOf(table, c.dir); !ok || got != c.want {
			t.Errorf("layerOf(%s) = %d, %v; want %d", c.dir, got, ok, c.want)
		}
	}
	if _, ok := layerOf(table, "bench/x"); ok {
		t.Error("bench/x is placed by no pattern, but layerOf placed it")
	}
	if patternMatchesAny("dist", map[string][]string{"pg": nil, "distx": nil}) {
		t.Error(`"dist" matched "distx"`)
	}
}
