package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/internal/fsync"
	"go.uber.org/zap"
)

// Options are SaveWith's and LoadWith's settings. The zero value is Save's
// and Load's behaviour.
type Options struct {
	// Keep is how many checkpoints to keep: 0 or 1, one; more, the newest
	// Keep, and LoadWith falls back to the newest intact one when a newer
	// one is damaged. Either way each is dir/step-NNNNNNNNN/, with
	// dir/latest naming the newest.
	Keep int
	// Logger gets LoadWith's warnings: a fallback past a damaged
	// checkpoint, a checkpoint too old to have checksums. nil: none.
	Logger *zap.Logger
	// ManifestOnly makes LoadWith read and verify only each checkpoint's
	// manifest and Files, leaving Params, Optimizer.Buffers and Extra
	// empty (Shapes filled): what a program reads to learn which model a
	// checkpoint holds before it builds one. A checkpoint damaged only in
	// its arrays is not noticed, so not fallen back past.
	ManifestOnly bool
}

func (o Options) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger
}

const (
	latestName = "latest" // dir/latest: "step-NNNNNNNNN crc32c:XXXXXXXX\n"
	stepPrefix = "step-"
)

// killedSave matches what follows ".step-" in the name of a temporary
// directory atomicdir.Write left when its process was killed; killedLatest
// what follows ".latest.tmp-" in writeLatest's.
var (
	killedSave   = regexp.MustCompile(`^[0-9]{9,}\.tmp-[0-9]+$`)
	killedLatest = regexp.MustCompile(`^[0-9]+$`)
)

// stepDirName is the rotated layout's directory for a checkpoint of step.
func stepDirName(step int) string { return fmt.Sprintf("%s%09d", stepPrefix, step) }

// parseStepDir is the step of a rotated checkpoint's directory name.
func parseStepDir(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, stepPrefix)
	if !ok || len(digits) < 9 || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// SaveWith saves c to dir keeping o.Keep checkpoints (at least one). It
// writes dir/step-NNNNNNNNN/ (c.Step, nine digits) atomically, into a
// temporary directory inside dir that is synced and then renamed (or
// swapped, when a checkpoint of that step is there) into place, then
// points dir/latest at it (written to a temporary file, synced, renamed),
// then removes every other checkpoint but the Keep-1 newest older than
// c.Step (a newer one is from a run that c's run abandoned, when it fell
// back past it). dir is created if needed, and never replaced or removed:
// SaveWith writes and deletes only its own files in it (Note [a checkpoint
// owns only its files]). A checkpoint an older Save wrote in dir itself
// (manifest.json, params/, optimizer/, extra/) is removed after the first
// new one is in place, file by file as its manifest lists them.
func SaveWith(dir string, c *Checkpoint, o Options) error { return save(dir, c, writeNPY, o) }

func save(dir string, c *Checkpoint, write writeFunc, o Options) error {
	if err := c.validate(); err != nil {
		return err
	}
	keep := max(o.Keep, 1)
	if steps, _ := stepDirs(dir); o.Keep <= 1 &&
		len(slices.DeleteFunc(steps, func(s int) bool { return s == c.Step })) > 1 {
		o.logger().Warn(
			"checkpoint: keeping one checkpoint: replacing the rotated checkpoints in this directory by the new one",
			zap.String("checkpoint", dir), zap.Int("replaced", len(steps)), zap.Int("step", c.Step))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: saving to %s: %w", dir, err)
	}
	name := stepDirName(c.Step)
	if err := writeDir(filepath.Join(dir, name), c, write); err != nil {
		return fmt.Errorf("checkpoint: saving to %s: %w", dir, err)
	}
	if err := writeLatest(dir, name); err != nil {
		return fmt.Errorf("checkpoint: saving to %s: %w", dir, err)
	}
	return prune(dir, c.Step, keep)
}

// writeLatest points dir/latest at name, atomically.
func writeLatest(dir, name string) error {
	line := name + " " + sumBytes([]byte(name)) + "\n"
	return fsync.WriteFile(filepath.Join(dir, latestName), func(w io.Writer) error {
		_, err := io.WriteString(w, line)
		return err
	})
}

// readLatest is the checkpoint directory name dir/latest points at. An
// error wraps fs.ErrNotExist when there is no dir/latest, ErrDamaged
// when its contents are not a line writeLatest wrote.
func readLatest(dir string) (string, error) {
	path := filepath.Join(dir, latestName)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, whole := strings.CutSuffix(string(b), "\n")
	name, sum, ok := strings.Cut(line, " ")
	if _, isStep := parseStepDir(name); !whole || !ok || !isStep || sum != sumBytes([]byte(name)) || len(b) > 64 {
		return "", fmt.Errorf("%s: %w: it does not hold a checkpoint name and its checksum (%q)", path, ErrDamaged, b)
	}
	return name, nil
}

// stepDirs lists dir's rotated checkpoints, newest first.
func stepDirs(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range entries {
		if s, ok := parseStepDir(e.Name()); ok && e.IsDir() {
			steps = append(steps, s)
		}
	}
	slices.Sort(steps)
	slices.Reverse(steps)
	return steps, nil
}

// prune keeps the checkpoint of step and the keep-1 newest older ones,
// removes the rest, killed saves' temporaries, and a checkpoint an older
// Save wrote in dir itself (removeOldLayout).
func prune(dir string, step, keep int) error {
	steps, err := stepDirs(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	kept := 0
	var errs []error
	for _, s := range steps {
		if s <= step && kept < keep {
			kept++
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(dir, stepDirName(s))))
	}
	errs = append(errs, removeTemporaries(dir), removeOldLayout(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: removing old checkpoints in %s: %w", dir, err)
	}
	return nil
}

// removeTemporaries deletes what killed saves left in dir: atomicdir's
// temporary step directories (it removes only those of the step it
// writes) and writeLatest's temporary files.
func removeTemporaries(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if rest, ok := strings.CutPrefix(name, "."+stepPrefix); ok && e.IsDir() && killedSave.MatchString(rest) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, name)))
		}
		if rest, ok := strings.CutPrefix(name, "."+latestName+".tmp-"); ok && e.Type().IsRegular() &&
			killedLatest.MatchString(rest) {
			errs = append(errs, os.Remove(filepath.Join(dir, name)))
		}
	}
	return errors.Join(errs...)
}

// removeOldLayout deletes a checkpoint an older Save wrote in dir itself
// and nothing else: its manifest first, so that a crash part way leaves
// no manifest naming missing files, then each file the manifest lists,
// then params/, optimizer/ and extra/ where that leaves them empty. A
// manifest.json that is not a checkpoint's is left alone (CheckDir names
// it); one too damaged to list its files is removed alone.
func removeOldLayout(dir string) error {
	path := filepath.Join(dir, manifestName)
	if !ownManifest(path) {
		return nil
	}
	m, readErr := readManifest(path)
	if err := os.Remove(path); err != nil {
		return err
	}
	if readErr != nil {
		return nil
	}
	var errs []error
	for _, e := range m.entries() {
		sub, _, _ := strings.Cut(e.File, "/")
		if fi, err := os.Lstat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() {
			continue // gone, or not the directory the checkpoint made: a link is never followed
		}
		if err := os.Remove(filepath.Join(dir, e.File)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, e := range m.Files { // beside the manifest; a link or a directory there is not the checkpoint's
		if fi, err := os.Lstat(filepath.Join(dir, e.File)); err == nil && fi.Mode().IsRegular() {
			errs = append(errs, os.Remove(filepath.Join(dir, e.File)))
		}
	}
	for _, sub := range []string{paramsDir, optimDir, extraDir} {
		if fi, err := os.Lstat(filepath.Join(dir, sub)); err == nil && fi.IsDir() {
			os.Remove(filepath.Join(dir, sub)) // fails, harmlessly, where other files remain
		}
	}
	return errors.Join(errs...)
}

// ownManifest reports whether path is a regular file that a checkpoint
// wrote: a manifest of one of its formats, even a damaged one.
func ownManifest(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxManifest {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(`"format": "goddp-checkpoint/`))
}

// Exists reports whether dir holds a checkpoint to resume from, in
// either layout: a manifest, a pointer to the newest, or a rotated
// checkpoint's directory. It does not check the checkpoint; LoadWith
// does. A directory with only a killed save's leftovers holds none.
func Exists(dir string) bool {
	for _, name := range []string{manifestName, latestName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	steps, _ := stepDirs(dir)
	return len(steps) > 0
}

// LoadWith reads the checkpoint in dir, as Load does, in either layout
// (see Options.Keep), and returns the directory it read it from: dir
// itself, or dir/step-NNNNNNNNN.
//
// In the rotated layout it reads the checkpoint dir/latest names. If that
// checkpoint is damaged or missing, or dir/latest is, then with o.Keep > 1
// it logs a warning naming what is wrong and tries the next older
// checkpoint, down to the oldest; with o.Keep <= 1 it returns the error.
// When none is intact, the error is the newest one's.
func LoadWith(dir string, o Options) (*Checkpoint, string, error) {
	steps, err := stepDirs(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
	}
	_, latestErr := os.Stat(filepath.Join(dir, latestName))
	if len(steps) == 0 && errors.Is(latestErr, fs.ErrNotExist) {
		c, err := loadOne(dir, o)
		return c, dir, err
	}
	// The rotated layout: the candidates, newest first.
	var candidates []string
	var first error // the newest's error
	name, err := readLatest(dir)
	if err == nil {
		at, _ := parseStepDir(name)
		candidates = append(candidates, name)
		for _, s := range steps {
			if s < at {
				candidates = append(candidates, stepDirName(s))
			}
		}
	} else {
		first = fmt.Errorf("%w: %w", ErrBadCheckpoint, err)
		if o.Keep <= 1 {
			return nil, "", first
		}
		for _, s := range steps {
			candidates = append(candidates, stepDirName(s))
		}
		if len(candidates) > 0 {
			o.logger().Warn("checkpoint: no valid pointer to the newest checkpoint; trying the newest intact one",
				zap.String("checkpoint", dir), zap.Error(err), zap.String("trying", candidates[0]))
		}
	}
	for i, name := range candidates {
		path := filepath.Join(dir, name)
		c, err := loadOne(path, o)
		if err == nil {
			return c, path, nil
		}
		if first == nil {
			first = err
		}
		if o.Keep <= 1 {
			return nil, "", err
		}
		if i+1 < len(candidates) {
			o.logger().Warn("checkpoint: this checkpoint is damaged; falling back to the next older one",
				zap.String("damaged", path), zap.Error(err), zap.String("trying", filepath.Join(dir, candidates[i+1])))
		}
	}
	return nil, "", fmt.Errorf("%w (and no older checkpoint in %s is intact)", first, dir)
}
