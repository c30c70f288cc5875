package atomicdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/goddp/ddp/internal/fsync"
)

// errNoExchange means the platform or file system can't swap two paths
// in one step.
var errNoExchange = errors.New("atomic exchange not supported")

// Write gives dir new contents atomically. It calls fill with a fresh
// temporary directory beside dir (in dir's parent, which it creates if
// needed), syncs every file fill wrote and the directory itself, then puts
// the new directory in dir's place and removes the old one.
//
// If fill or anything before the swap fails, dir is untouched and the
// temporary directory is removed; a process killed before the swap leaves
// dir untouched too, and the next Write removes its leftovers. The swap is
// one rename(2) when dir does not exist yet, and one
// renameat2(RENAME_EXCHANGE) on Linux when it does. Where that is not
// available, dir is first moved aside to ".<name>.old-*" in the same parent,
// so a crash between the two renames leaves the old contents there.
//
// Only one Write per dir may run at a time.
func Write(dir string, fill func(tmp string) error) error {
	return write(dir, fill, exchange)
}

func write(dir string, fill func(tmp string) error, swap func(a, b string) error) (err error) {
	dir = filepath.Clean(dir)
	parent, base := filepath.Split(dir)
	if base == "" || base == "." || base == ".." || base == string(filepath.Separator) {
		return fmt.Errorf("atomicdir: %q names no directory to write; give a path such as out/model", dir)
	}
	if parent == "" {
		parent = "."
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("atomicdir: %s exists and is not a directory; remove it or choose another path", dir)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("atomicdir: creating the parent of %s: %w", dir, err)
	}
	removeLeftovers(parent, base)
	tmp, err := os.MkdirTemp(parent, tmpPrefix(base))
	if err != nil {
		return fmt.Errorf("atomicdir: creating a temporary directory beside %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err = fill(tmp); err != nil {
		return err
	}
	if err = os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("atomicdir: %w", err)
	}
	if err = syncTree(tmp); err != nil {
		return fmt.Errorf("atomicdir: syncing %s: %w", tmp, err)
	}
	return replace(tmp, dir, parent, base, swap)
}

// replace puts the complete directory tmp in dir's place.
func replace(tmp, dir, parent, base string, swap func(a, b string) error) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("atomicdir: %w", err)
		}
		return fsync.Dir(parent)
	}
	old := tmp // after an exchange, tmp holds the old contents
	switch err := swap(tmp, dir); {
	case errors.Is(err, errNoExchange):
		if old, err = moveAside(dir, parent, base); err != nil {
			return err
		}
		if err := os.Rename(tmp, dir); err != nil {
			if back := os.Rename(old, dir); back != nil {
				return fmt.Errorf("atomicdir: %w; the previous contents are in %s", err, old)
			}
			return fmt.Errorf("atomicdir: %w", err)
		}
	case err != nil:
		return fmt.Errorf("atomicdir: replacing %s: %w", dir, err)
	}
	if err := fsync.Dir(parent); err != nil {
		return fmt.Errorf("atomicdir: %w", err)
	}
	// The new contents are in place; failing to delete the old ones
	// loses nothing, and the next Write retries.
	os.RemoveAll(old)
	return nil
}

// moveAside renames dir to a fresh ".<base>.old-*" name in parent.
func moveAside(dir, parent, base string) (string, error) {
	old, err := os.MkdirTemp(parent, oldPrefix(base))
	if err != nil {
		return "", fmt.Errorf("atomicdir: %w", err)
	}
	if err := os.Remove(old); err != nil {
		return "", fmt.Errorf("atomicdir: %w", err)
	}
	if err := os.Rename(dir, old); err != nil {
		return "", fmt.Errorf("atomicdir: moving %s aside: %w", dir, err)
	}
	return old, nil
}

func tmpPrefix(base string) string { return "." + base + ".tmp-" }
func oldPrefix(base string) string { return "." + base + ".old-" }

// removeLeftovers deletes the temporary directories of earlier Writes to
// parent/base that were killed before their swap, and old contents that
// were never removed. A leftover ".old-*" is kept while base itself is
// missing: it is then the only copy.
func removeLeftovers(parent, base string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	_, statErr := os.Lstat(filepath.Join(parent, base))
	for _, e := range entries {
		name := e.Name()
		stale := isLeftover(name, tmpPrefix(base)) || isLeftover(name, oldPrefix(base)) && statErr == nil
		if stale && e.IsDir() {
			os.RemoveAll(filepath.Join(parent, name))
		}
	}
}

// isLeftover reports whether name is prefix followed by the digits
// os.MkdirTemp puts in place of its "*".
func isLeftover(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

// syncTree fsyncs every regular file and directory under root, root last.
func syncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			dirs = append(dirs, path)
			return nil
		case d.Type().IsRegular():
			return syncFile(path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := fsync.Dir(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
