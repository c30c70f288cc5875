package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// MaxStep is the largest step a checkpoint may record: the nine digits of
// a rotated checkpoint's directory name (step-NNNNNNNNN). A manifest
// claiming more is damaged, not a real run (a billion steps).
const MaxStep = 999_999_999

// ErrLocked: another process holds a checkpoint directory (Lock).
var ErrLocked = errors.New("checkpoint: the directory is in use by another run")

// ErrNotOurs is wrapped by CheckDir's error about a file in a checkpoint
// directory that a save would overwrite or remove but that no checkpoint
// wrote.
var ErrNotOurs = errors.New("checkpoint: the directory holds a file that is not a checkpoint's")

// lockName is the lock file in a checkpoint directory.
const lockName = ".ddp-train.lock"

// Note [a checkpoint owns only its files]
//
// A checkpoint directory is the user's: their home, the working
// directory, a mount point (a Kubernetes volume), a directory whose parent
// they cannot write. So a save never replaces, renames or removes the
// directory itself, nor anything in it that a checkpoint did not write:
// each checkpoint is its own subdirectory, dir/step-NNNNNNNNN/, written
// as a temporary directory inside dir and renamed into place (atomicdir
// there), dir/latest names the newest, and pruning removes only step
// directories, the temporaries of killed saves (.step-NNNNNNNNN.tmp-N,
// .latest.tmp-N) and, once, a checkpoint of the layout older versions
// wrote in dir itself, file by file as its manifest lists them. Everything
// a save writes is inside dir, so a save needs only dir to be writable.
// CheckDir refuses, up front, a directory holding a file of one of those
// names that a checkpoint did not write.

// Note [one run per checkpoint directory]
//
// Two runs that save into one directory destroy each other's work: each
// prunes and replaces what the other wrote. Lock takes an exclusive
// flock(2) on a file inside the directory, dir/.ddp-train.lock, so that
// every path to the directory (a symbolic link, a bind mount) is the same
// lock. The file is opened through a handle on the directory with
// O_NOFOLLOW, and must be a regular file with one link, so that a link
// planted in its place (by another user of a shared directory) is refused,
// never followed and truncated. The kernel drops the lock when the process
// ends, however it ends, so a crashed run never leaves a stale lock
// behind. The file records the holder's pid, host and start time, for the
// message a second run gets. flock covers the processes of one host (and
// NFS where the server supports it); the runs of a multi-node job must
// still give each job a directory of its own. (Versions before this one
// locked <parent>/.<name>.lock beside the directory; that file is no
// longer made or read.)

// Lock takes dir for this process until release is called or the process
// ends: Note [one run per checkpoint directory]. It fails at once, with an
// error wrapping ErrLocked that names the holder, when another process
// holds it. dir is created if needed.
func Lock(dir string) (release func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockName)
	f, err := openLock(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	if !held {
		holder, _ := io.ReadAll(io.NewSectionReader(f, 0, 256))
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "another process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s (lock file %s); give each run a --checkpoint directory of its own, or "+
			"wait for that run to end", ErrLocked, dir, who, path)
	}
	host, _ := os.Hostname()
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d on %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	}
	return func() error {
		// The lock goes with the descriptor; the file stays, and the
		// next holder rewrites it.
		return f.Close()
	}, nil
}

// CheckDir reports a file in dir that a save would overwrite or remove
// but that no checkpoint wrote, with an error wrapping ErrNotOurs that
// names it: a manifest.json that is not a checkpoint's manifest, a latest
// that is not a pointer to one, a step-NNNNNNNNN that is not a directory
// holding a checkpoint's manifest, or a lock file that is not a regular
// file. A missing dir holds none.
func CheckDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		_, isStep := parseStepDir(name)
		var why string
		switch {
		case name == manifestName && !ownManifest(path):
			why = "it is not a checkpoint's manifest"
		case name == latestName && !ownLatest(path):
			why = "it is not a checkpoint's pointer to the newest (a line naming a step-NNNNNNNNN directory)"
		case isStep && (!e.IsDir() || !regular(filepath.Join(path, manifestName))):
			why = "it is not a directory holding a checkpoint (a manifest.json)"
		case name == lockName && !e.Type().IsRegular():
			why = "it is not a regular file (a link is never followed)"
		default:
			continue
		}
		return fmt.Errorf(
			"%w: %s: %s, and a checkpoint would overwrite or remove it; move it away, or choose another --checkpoint directory",
			ErrNotOurs, path, why)
	}
	return nil
}

// regular reports whether path is a regular file (not a link to one).
// A step directory's manifest is not read here: a damaged one is
// LoadWith's to report, or to fall back past.
func regular(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().IsRegular()
}

// ownLatest reports whether path looks like a file writeLatest wrote: a
// small regular file starting with a step directory's name (damaged or
// not: LoadWith says which).
func ownLatest(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 64 {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.HasPrefix(b, []byte(stepPrefix))
}

// Remove deletes the checkpoints in dir, in either layout, and nothing
// else: dir/latest and every dir/step-NNNNNNNNN, the leftovers of killed
// saves, and a checkpoint of the older layout in dir itself, file by file
// as its manifest lists them. It is how a run that was told to start over
// (ddp-train --overwrite-checkpoints) clears a directory; a run never
// calls it on its own.
func Remove(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if _, isStep := parseStepDir(name); isStep && e.IsDir() || name == latestName && ownLatest(filepath.Join(dir, name)) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
		}
	}
	errs = append(errs, removeTemporaries(dir), removeOldLayout(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: removing the checkpoints in %s: %w", dir, err)
	}
	return nil
}

// Steps lists, ascending, the steps of the rotated checkpoints in dir
// (dir/step-NNNNNNNNN), for messages; nil for none or the one-checkpoint
// layout.
func Steps(dir string) []int {
	steps, _ := stepDirs(dir)
	slices.Sort(steps)
	return steps
}
