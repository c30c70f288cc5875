package atomicdir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fillWith returns a fill that writes the named files, each holding its
// own name.
func fillWith(names ...string) func(string) error {
	return func(tmp string) error {
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(tmp, n), []byte(n), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// contents lists dir's files, or nil if dir does not exist.
func contents(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func noExchange(a, b string) error { return errNoExchange }

// Creating, then replacing, by exchange and by moving aside: the
// directory ends with exactly the new files and nothing is left beside it.
func TestWriteReplacesContents(t *testing.T) {
	for name, swap := range map[string]func(a, b string) error{"exchange": exchange, "move aside": noExchange} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "sub", "out") // the parent is created
			if err := write(dir, fillWith("a", "b"), swap); err != nil {
				t.Fatal(err)
			}
			if got := contents(t, dir); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("after the first write: %v", got)
			}
			if err := write(dir, fillWith("c"), swap); err != nil {
				t.Fatal(err)
			}
			if got := contents(t, dir); !slices.Equal(got, []string{"c"}) {
				t.Errorf("after the second write: %v, want [c]", got)
			}
			if got := contents(t, filepath.Join(root, "sub")); !slices.Equal(got, []string{"out"}) {
				t.Errorf("beside the directory: %v, want just out", got)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("the directory's mode: %v, %v; want 0755", fi.Mode(), err)
			}
		})
	}
}

// A fill that fails after writing some files leaves the old contents and
// no temporary directory.
func TestFailedFillKeepsTheOldContents(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	if err := Write(dir, fillWith("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(dir, func(tmp string) error {
		if err := fillWith("new1", "new2")(tmp); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write returned %v, want fill's error", err)
	}
	if got := contents(t, dir); !slices.Equal(got, []string{"old"}) {
		t.Errorf("after a failed fill: %v, want [old]", got)
	}
	if got := contents(t, root); !slices.Equal(got, []string{"out"}) {
		t.Errorf("beside the directory: %v, want just out", got)
	}
	// A failed first write creates nothing.
	if err := Write(filepath.Join(root, "never"), func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got := contents(t, filepath.Join(root, "never")); got != nil {
		t.Errorf("a failed first write created %v", got)
	}
}

// Leftovers of killed writes are removed; a moved-aside copy is kept
// while the directory itself is missing, as it is then the only copy;
// look-alike names are not touched.
func TestLeftovers(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	mk := func(name string) {
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk(".out.old-42")
	mk(".out.tmp-7")
	mk(".out.tmp-mine") // not a MkdirTemp name
	mk("out.tmp-1")
	if err := Write(dir, fillWith("x")); err != nil {
		t.Fatal(err)
	}
	want := []string{".out.old-42", ".out.tmp-mine", "out", "out.tmp-1"}
	if got := contents(t, root); !slices.Equal(got, want) {
		t.Errorf("with out missing: %v, want %v", got, want)
	}
	if err := Write(dir, fillWith("y")); err != nil {
		t.Fatal(err)
	}
	want = []string{".out.tmp-mine", "out", "out.tmp-1"}
	if got := contents(t, root); !slices.Equal(got, want) {
		t.Errorf("with out present: %v, want %v", got, want)
	}
}

func TestWriteRejectsBadTargets(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, ".", "/", ""} {
		if err := Write(dir, fillWith("x")); err == nil {
			t.Errorf("Write(%q) succeeded", dir)
		}
	}
}
