package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

func ctx10s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newFileStore(t *testing.T, path string, workers int) *store.FileStore {
	t.Helper()
	s, err := store.NewFileStore(path, workers, store.FileStoreOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFileStoreFormat pins the file format to c10d's: records of a
// length-prefixed key ("/" + key, or "-/" + key for a delete) and value.
func TestFileStoreFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	s := newFileStore(t, path, 0)
	defer s.Close()
	if err := s.Set(ctx10s(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx10s(t), "k"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "\x02\x00\x00\x00/k\x01\x00\x00\x00v" + "\x03\x00\x00\x00-/k\x00\x00\x00\x00"
	if string(got) != want {
		t.Fatalf("file holds %q, want %q", got, want)
	}
}

// TestFileStoreLastWorkerRemovesFile: as in c10d, each worker counts itself
// out on Close and the last one removes the file.
func TestFileStoreLastWorkerRemovesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a, b := newFileStore(t, path, 2), newFileStore(t, path, 2)
	if err := a.Set(ctx10s(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the file went before the last worker closed: %v", err)
	}
	if _, err := a.Get(ctx10s(t), "k"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: err = %v; want ErrClosed", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the last worker left the file: %v", err)
	}
}

// TestFileStoreNoticesNewFile: a store whose file was removed and started
// again forgets the old keys.
func TestFileStoreNoticesNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	s := newFileStore(t, path, 0)
	defer s.Close()
	if err := s.Set(ctx10s(t), "old", []byte("a-long-value-so-the-new-file-is-shorter")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other := newFileStore(t, path, 0)
	defer other.Close()
	for _, k := range []string{"x", "y"} {
		if err := other.Set(ctx10s(t), k, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.NumKeys(ctx10s(t)); err != nil || n != 2 {
		t.Fatalf("NumKeys = %d, %v; want 2, the new file's keys only", n, err)
	}
}

func TestFileStoreCorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(path, []byte("\x05\x00\x00\x00/k\x01"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newFileStore(t, path, 0)
	defer s.Close()
	if _, err := s.Get(ctx10s(t), "k"); !errors.Is(err, pg.ErrComm) {
		t.Fatalf("Get on a corrupt file: err = %v; want pg.ErrComm", err)
	}
}

func TestFileStoreNeedsPath(t *testing.T) {
	if _, err := store.NewFileStore("", 1, store.FileStoreOptions{}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("err = %v; want pg.ErrInvalidArgument", err)
	}
	if _, err := store.NewFileStore(filepath.Join(t.TempDir(), "no", "such", "dir"), 1,
		store.FileStoreOptions{}); err == nil {
		t.Fatal("NewFileStore in a missing directory succeeded")
	}
}
