package fsync

import (
	"io"
	"os"
	"path/filepath"
)

// Dir syncs directory dir, making the renames and removals in it durable.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteFile replaces path atomically and durably with what write writes:
// into a temporary file created with O_EXCL beside path
// (".<name>.tmp-N", the name os.CreateTemp gives), which is given mode
// 0644, synced and renamed over path; then path's directory is synced
// (Dir). A reader sees path's old contents or all of the new ones, a link
// at path is replaced and never followed, and on error the temporary file
// is removed and path is as it was (a crash can leave the temporary file:
// a writer that cares removes ".<name>.tmp-" followed by digits).
func WriteFile(path string, write func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return Dir(dir)
}
