package fsync_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/goddp/ddp/internal/fsync"
)

// A link planted at the name is replaced, its target untouched; a write
// that fails leaves the old file and no temporary behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "latest")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := fsync.WriteFile(path, write("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the link's target became %q", b)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("%s: %v, %v; want a regular file of mode 0644", path, fi, err)
	}
	boom := errors.New("boom")
	if err := fsync.WriteFile(path, func(w io.Writer) error { io.WriteString(w, "half"); return boom }); !errors.Is(err,
		boom) {
		t.Fatalf("err %v, want the write's", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("after a failed write %s holds %q, want the old contents", path, b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".latest.tmp-*")); len(left) > 0 {
		t.Fatalf("temporaries left: %v", left)
	}
}
