package checkpoint

import (
	"errors"
	"fmt"
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

// Note [one run per checkpoint directory]
//
// Two runs that save into one directory destroy each other's work: each
// prunes and replaces what the other wrote. Lock takes an exclusive
// flock(2) on a file beside the directory, <parent>/.<name>.lock, not in
// it, since a save replaces the directory as a whole (atomicdir.Write).
// The kernel drops the lock when the process ends, however it ends, so a
// crashed run never leaves a stale lock behind. The file records the
// holder's pid, host and start time, for the message a second run gets.
// flock covers the processes of one host (and NFS where the server
// supports it); the runs of a multi-node job must still give each job a
// directory of its own.

// lockPath is the lock file of dir.
func lockPath(dir string) string {
	dir = filepath.Clean(dir)
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".lock")
}

// Lock takes dir for this process until release is called or the process
// ends: Note [one run per checkpoint directory]. It fails at once, with an
// error wrapping ErrLocked that names the holder, when another process
// holds it. dir's parent is created if needed.
func Lock(dir string) (release func() error, err error) {
	path := lockPath(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: locking %s: %w", dir, err)
	}
	if !held {
		holder, _ := os.ReadFile(path)
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "another process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s (lock file %s); give each run a --checkpoint directory of its own, or wait for that run to end", ErrLocked, dir, who, path)
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

// Remove deletes the checkpoints in dir, in either layout: the manifest
// and its subdirectories, dir/latest and every dir/step-NNNNNNNNN, and
// the leftovers of killed saves. Nothing else in dir is touched. It is
// how a run that was told to start over (ddp-train --overwrite-checkpoints)
// clears a directory; a run never calls it on its own.
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
		_, isStep := parseStepDir(name)
		switch {
		case name == manifestName, name == latestName, name == "params", name == "optimizer", name == "extra", isStep,
			strings.HasPrefix(name, ".") && (strings.Contains(name, ".tmp-") || strings.Contains(name, ".old-")):
			errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
		}
	}
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
