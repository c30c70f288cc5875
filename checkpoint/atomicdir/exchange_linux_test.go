//go:build linux

package atomicdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// exchange swaps two directories; Write relies on it being one step.
func TestExchangeSwapsDirectories(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, filepath.Base(d)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := exchange(a, b)
	if errors.Is(err, errNoExchange) {
		t.Skip("this file system has no RENAME_EXCHANGE; Write moves the old directory aside instead")
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a, "b")); err != nil {
		t.Errorf("after the exchange a does not hold b's file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(b, "a")); err != nil {
		t.Errorf("after the exchange b does not hold a's file: %v", err)
	}
}
