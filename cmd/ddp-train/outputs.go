package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Note [outputs only on success]
//
// A run is trusted with days of compute, so it must never write results
// for a run that failed, nor fail after hours for a path it could have
// checked at the start:
//
//   - Every output path is checked before any worker starts (checkOutputs,
//     exit 2): --save and --checkpoint must be directories or absent under
//     a writable directory, --summary a file in a writable directory,
//     --timeline a directory it can make. The check does in each directory
//     what the run will do there (create a file, rename it, remove it, and
//     a subdirectory for --checkpoint), so that a read-only file system,
//     a missing permission or a mount point's EBUSY shows before training.
//     A worker under an external launcher checks the paths its rank
//     writes before the rendezvous.
//   - --save and --summary are written only at the end of a run whose
//     parameters passed the non-finite guard: the summary atomically, and
//     --save file by file, each file whole and DIR/.ddp-train-save naming
//     the last complete set (model's Note [a save owns only its files]);
//     the summary is written to a temporary file first and renamed after
//     the save, so a failure of the save leaves the old summary, and a
//     failed run leaves both as they were.
//
// Note [outputs own only their files]
//
// An output directory is the user's: the working directory, $HOME, a
// Kubernetes volume's mount point, a directory whose parent they cannot
// write. So no output replaces or removes a directory it was given, nor
// a file in it that the run's outputs did not write: --save writes
// <name>.npy files and .ddp-train-save (model's Note [a save owns only
// its files]), --checkpoint its step directories, latest and lock file
// (checkpoint's Note [a checkpoint owns only its files]), --flight-dir
// nccl_trace_rank_N, --timeline rank-N.json, --summary its one file. Up
// front (exit 2, nothing trained): a directory holding a file of one of
// those names that the outputs did not write is refused, naming the file
// (model.CheckSaveDir, checkpoint.CheckDir); outputs that overlap (--save
// equal to, inside or containing --checkpoint; --summary, --timeline or
// --flight-dir where --save or --checkpoint write their own files) are
// refused, comparing real paths (checkOverlaps); and a directory the run
// makes inside an output (CHECKPOINT/flight) that is a link or not a
// directory is refused, since nothing is written through a link the run
// did not make.
//
// Note [checkpoint directories are owned]
//
// A run never deletes or overwrites checkpoints it did not write. Without
// --resume, a --checkpoint directory that already holds checkpoints is
// refused (exit 2) unless --overwrite-checkpoints says to delete them and
// start over. With --resume, a directory that holds none yet (empty, or
// missing) starts the run from step 0, saying so in one line, so that a
// job that always passes --resume (an elastic or JobSet job) can start;
// a damaged checkpoint is still exit 2. One run per directory at a time:
// the launcher (or, under an external launcher, rank 0) holds
// checkpoint.Lock, a lock file inside the directory, for the whole run,
// and a second run, by any path to the directory, is refused at once
// naming the holder.
//
// Note [resume that cannot lie]
//
// A checkpoint records what shapes the trajectory (runMeta): the world
// size, seed, batch size, gradient accumulation, optimizer and learning
// rate, comm hook and its settings, model, shuffling and a digest of the
// data. --resume compares each with this run's and refuses a mismatch
// (exit 2) naming every field, unless --resume-allow-changes names it
// (then it is logged). A checkpoint at or past the steps asked for has
// nothing left to train: the run writes its outputs and exits 0, as a
// requeued job that had finished must.

// checkOutputs checks the output paths this process writes: all of them
// (rank0), or only those every rank writes, --timeline and --flight-dir.
// Errors are usage errors (exit 2).
func checkOutputs(c config, rank0 bool) error {
	for _, o := range []struct{ flag, path string }{{"--timeline", c.timeline}, {"--flight-dir", c.flightDir}} {
		if o.path == "" {
			continue
		}
		if err := checkDirPath(o.flag, o.path, false); err != nil {
			return err
		}
	}
	if !rank0 {
		return nil
	}
	if err := checkOverlaps(c); err != nil {
		return err
	}
	if c.saveDir != "" {
		if err := checkDirPath("--save", c.saveDir, false); err != nil {
			return err
		}
		if err := model.CheckSaveDir(c.saveDir, model.ParamNames(c.model, len(c.hidden))); err != nil {
			return usagef("--save %s: %v", c.saveDir, err)
		}
	}
	if c.checkpointDir != "" {
		if err := checkDirPath("--checkpoint", c.checkpointDir, true); err != nil {
			return err
		}
		if err := checkpoint.CheckDir(c.checkpointDir); err != nil {
			return usagef("--checkpoint %s: %v", c.checkpointDir, err)
		}
	}
	if err := checkFlightDir(c); err != nil {
		return err
	}
	if c.summary != "" {
		if err := checkFilePath("--summary", c.summary); err != nil {
			return err
		}
	}
	return nil
}

// checkDirPath: path is a directory or absent, and the nearest directory
// above it that exists can be written; sub: subdirectories too.
func checkDirPath(flagName, path string, sub bool) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.IsDir():
		return usagef("%s %s: it is a file, not a directory", flagName, path)
	case err == nil:
		return writable(flagName, path, path, sub)
	case !errors.Is(err, fs.ErrNotExist):
		return usagef("%s %s: %v", flagName, path, err)
	}
	for dir := filepath.Dir(filepath.Clean(path)); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return usagef("%s %s: %s is a file, so the directory cannot be made", flagName, path, dir)
			}
			return writable(flagName, path, dir, true) // the run makes a directory here
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			return usagef("%s %s: %v", flagName, path, err)
		}
	}
}

// checkFilePath: path is not a directory, and its directory exists and
// can be written.
func checkFilePath(flagName, path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef("%s %s: it is a directory; give a file name", flagName, path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return usagef("%s %s: the directory %s does not exist; create it first", flagName, path, dir)
	}
	return writable(flagName, path, dir, false)
}

// writable checks that the run can do in dir what it will do there, by
// doing it: create a file, rename it, remove it, and with sub the same
// with a directory.
func writable(flagName, path, dir string, sub bool) error {
	fail := func(err error) error {
		return usagef("%s %s: cannot write in %s: %v", flagName, path, dir, err)
	}
	f, err := os.CreateTemp(dir, ".ddp-train-probe-*")
	if err != nil {
		return fail(err)
	}
	f.Close()
	renamed := f.Name() + ".renamed"
	err = os.Rename(f.Name(), renamed)
	if err != nil {
		os.Remove(f.Name())
		return fail(err)
	}
	if err := os.Remove(renamed); err != nil {
		return fail(err)
	}
	if !sub {
		return nil
	}
	d, err := os.MkdirTemp(dir, ".ddp-train-probe-*")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(d)
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		return fail(err)
	}
	if err := os.Rename(d, d+".renamed"); err != nil {
		return fail(err)
	}
	if err := os.RemoveAll(d + ".renamed"); err != nil {
		return fail(err)
	}
	return nil
}

// checkFlightDir refuses a CHECKPOINT/flight (the default --flight-dir)
// that is not a directory the run may write into: Note [outputs own only
// their files].
func checkFlightDir(c config) error {
	if c.flightDir != "" || c.checkpointDir == "" {
		return nil
	}
	if err := ownSubdir(filepath.Join(c.checkpointDir, "flight")); err != nil {
		return usagef("--checkpoint %s: %v; remove it, or name a --flight-dir", c.checkpointDir, err)
	}
	return nil
}

// ownSubdir: path, a directory the run makes inside an output, is absent
// or a directory, not a link to one.
func ownSubdir(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, and no output is written through a link the run did not make", path)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	}
	return nil
}

// checkOverlaps refuses outputs that would write over each other's files
// (Note [outputs own only their files]), comparing real paths.
func checkOverlaps(c config) error {
	save, ck := realPath(c.saveDir), realPath(c.checkpointDir)
	if save != "" && ck != "" && (within(save, ck) || within(ck, save)) {
		return usagef("--save %s and --checkpoint %s overlap (one is, or is inside, the other), and the final save and the "+
			"checkpoints would replace each other's files; give each a directory of its own", c.saveDir, c.checkpointDir)
	}
	names := model.ParamNames(c.model, len(c.hidden))
	for _, o := range []struct{ flag, path string }{{"--summary", c.summary}, {"--timeline", c.timeline},
		{"--flight-dir", c.flightDir}} {
		p := realPath(o.path)
		if p == "" {
			continue
		}
		if first, ok := firstBelow(p, ck); ok && checkpointOwns(first) {
			return usagef("%s %s lies where --checkpoint %s keeps its own files (%s); choose a path outside them", o.flag,
				o.path, c.checkpointDir, first)
		}
		if first, ok := firstBelow(p, save); ok && saveOwns(first, names) {
			return usagef("%s %s lies where --save %s writes its own files (%s); choose a path outside them", o.flag, o.path,
				c.saveDir, first)
		}
	}
	return nil
}

// checkpointOwns: the entry name of a checkpoint directory is one that
// its saves write or prune.
func checkpointOwns(name string) bool {
	switch name {
	case "manifest.json", "latest", "params", "optimizer", "extra", ".ddp-train.lock":
		return true
	}
	return strings.HasPrefix(name, "step-") || strings.HasPrefix(name, ".step-") || strings.HasPrefix(name, ".latest.tmp-")
}

// saveOwns: the entry name of a --save directory is one that the save
// writes or removes.
func saveOwns(name string, params []string) bool {
	for _, n := range append(params, strings.TrimSuffix(model.SaveList, ".npy"), model.CardFile) {
		if name == n+".npy" || name == n || strings.HasPrefix(name, "."+n) {
			return true
		}
	}
	return false
}

// realPath is path made absolute with every link in its longest existing
// prefix resolved, so that two paths to one place compare equal; "" for
// "".
func realPath(path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if dir == filepath.Dir(dir) {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// within: path is dir or inside it.
func within(path, dir string) bool {
	_, ok := firstBelow(path, dir)
	return ok
}

// firstBelow is the first element of path below dir ("" for dir itself),
// and whether path is dir or inside it.
func firstBelow(path, dir string) (string, bool) {
	if path == "" || dir == "" {
		return "", false
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	if rel == "." {
		return "", true
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	return first, true
}

// setupChecks is checkOutputs and claimCheckpoint for a worker under an
// external launcher (torchrun, mpirun, srun, Kubernetes), where no
// launcher of ours checked them: each rank checks what it writes, rank 0
// takes the checkpoint directory, and the ranks agree on the outcome with
// one allreduce, so that when one rank fails its checks every rank stops
// at once, naming it, instead of waiting for it until the timeout.
// Collective.
func setupChecks(ctx context.Context, c config, g pg.ProcessGroup, log *zap.Logger) (release func(), err error) {
	release = func() {}
	err = checkOutputs(c, g.Rank() == 0)
	if err == nil && g.Rank() == 0 {
		release, err = claimCheckpoint(c, log)
		if err != nil {
			release = func() {}
		}
	}
	failed := []int64{0} // the highest failing rank + 1
	if err != nil {
		failed[0] = int64(g.Rank()) + 1
	}
	if aerr := g.AllReduce(ctx, pg.Int64s(failed), pg.Op(pg.Max)).Wait(ctx); aerr != nil && err == nil {
		err = fmt.Errorf("agreeing that every rank passed its checks: %w", aerr)
	}
	if err == nil && failed[0] > 0 {
		err = usagef("rank %d failed its checks before training (its own error line says why)", failed[0]-1)
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// claimCheckpoint takes --checkpoint for this run (Note [checkpoint
// directories are owned]); release it when the run ends.
func claimCheckpoint(c config, log *zap.Logger) (release func(), err error) {
	if c.checkpointDir == "" {
		return func() {}, nil
	}
	if c.resume && c.overwriteCheckpoints {
		return nil, usagef("--resume continues the checkpoints in %s and --overwrite-checkpoints deletes them; choose one",
			c.checkpointDir)
	}
	unlock, err := checkpoint.Lock(c.checkpointDir)
	if errors.Is(err, checkpoint.ErrLocked) {
		return nil, usageError{err}
	}
	if err != nil {
		return nil, err
	}
	release = func() { unlock() }
	if c.resume || !checkpoint.Exists(c.checkpointDir) {
		return release, nil
	}
	what := "a checkpoint"
	if steps := checkpoint.Steps(c.checkpointDir); len(steps) > 0 {
		what = fmt.Sprintf("checkpoints of steps %s", joinInts(steps))
	}
	if !c.overwriteCheckpoints {
		release()
		return nil, usagef("--checkpoint %s already holds %s, which this run did not write and would replace; continue "+
			"that run with --resume, or pass --overwrite-checkpoints to delete them and start over", c.checkpointDir, what)
	}
	log.Warn("--overwrite-checkpoints: deleting the checkpoints already in the directory",
		zap.String("checkpoint", c.checkpointDir), zap.String("deleting", what))
	if err := checkpoint.Remove(c.checkpointDir); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// runMeta is what a checkpoint records of the run (Note [resume that
// cannot lie]), beside "comm_hook", which restoreHookState reads.
func (t *trainer) runMeta() map[string]string {
	if t.dataSum == "" { // once: it reads the whole training set
		t.dataSum = dataDigest(t.ds)
	}
	c := t.c
	hidden := make([]string, len(c.hidden))
	for i, h := range c.hidden {
		hidden[i] = strconv.Itoa(h)
	}
	return map[string]string{
		"comm_hook":           hookLabel(c),
		"world_size":          strconv.Itoa(t.g.Size()),
		"seed":                strconv.FormatInt(c.seed, 10),
		"batch_size":          strconv.Itoa(c.batchSize),
		"grad_accum":          strconv.Itoa(c.gradAccum),
		"optimizer":           c.optimizer,
		"lr":                  strconv.FormatFloat(c.lr, 'g', -1, 64),
		"powersgd_start_iter": strconv.Itoa(c.powersgdStartIter),
		"model": fmt.Sprintf("%s hidden=%s activation=%s dtype=%s", c.model, strings.Join(hidden, ","),
			c.activation, c.dtype),
		"shuffle": strconv.FormatBool(c.shuffle),
		"data":    t.dataSum,
	}
}

// metaFields are runMeta's keys, in the order mismatches are reported.
var metaFields = []string{"world_size", "seed", "batch_size", "grad_accum", "optimizer", "lr", "comm_hook",
	"powersgd_start_iter", "model", "shuffle", "data"}

// dataDigest is a digest of the training set as loaded: shape, features
// and labels.
func dataDigest(ds *dataset.Dataset) string {
	h := sha256.New()
	var b [8]byte
	for _, n := range append([]int{ds.N, ds.D, ds.Classes}, ds.Shape...) {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	buf := make([]byte, 0, 8*4096)
	row := make([]float64, ds.D)
	for k := range ds.N { // row by row: X, or IDX pixels (Note [compact samples]), to the same bits
		ds.Row(k, row)
		for _, x := range row {
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(x))
			if len(buf) == cap(buf) {
				h.Write(buf)
				buf = buf[:0]
			}
		}
	}
	h.Write(buf)
	buf = buf[:0]
	for _, y := range ds.Y {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(y))
		if len(buf) >= cap(buf)-8 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// checkResume compares a checkpoint's record of its run with this run's
// (Note [resume that cannot lie]).
func (t *trainer) checkResume(saved map[string]string) error {
	allowed := map[string]bool{}
	for _, f := range strings.Split(t.c.resumeAllow, ",") {
		if f = strings.TrimSpace(f); f != "" {
			allowed[f] = true
		}
	}
	now := t.runMeta()
	var refused, changed, unknown []string
	for _, f := range metaFields {
		old, ok := saved[f]
		switch {
		case !ok:
			unknown = append(unknown, f)
		case old != now[f] && allowed[f]:
			changed = append(changed, fmt.Sprintf("%s %s → %s", f, old, now[f]))
		case old != now[f]:
			refused = append(refused, fmt.Sprintf("%s: the checkpoint's run had %s, this run has %s", f, old, now[f]))
		}
	}
	if len(refused) > 0 {
		return usagef("--resume would change the run it continues: %s; resume with the same settings, or name the fields "+
			"you mean to change in --resume-allow-changes (%s)",
			strings.Join(refused, "; "), strings.Join(fieldsOf(refused), ","))
	}
	if len(changed) > 0 && t.g.Rank() == 0 {
		t.log.Warn("--resume-allow-changes: resuming with changed settings", zap.Strings("changed", changed))
	}
	if len(unknown) > 0 && len(unknown) < len(metaFields) && t.g.Rank() == 0 {
		t.log.Warn("the checkpoint does not record these settings, so they cannot be checked", zap.Strings("fields", unknown))
	} else if len(unknown) == len(metaFields) && t.g.Rank() == 0 {
		t.log.Warn("the checkpoint was written before checkpoints recorded their run's settings; they cannot be checked")
	}
	return nil
}

func fieldsOf(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i], _, _ = strings.Cut(l, ":")
	}
	return out
}

// knownFields checks --resume-allow-changes' names.
func knownFields(list string) error {
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(metaFields, f) {
			return usagef("--resume-allow-changes %q: %q is not a setting a checkpoint records; choose from %s", list, f,
				strings.Join(metaFields, ","))
		}
	}
	return nil
}

// writeOutputs writes --save and --summary on rank 0 at the end of a good
// run (Note [outputs only on success]): the summary into a temporary file
// first, then the parameters, then the summary renamed into place.
func (t *trainer) writeOutputs(s *session, sum summary) error {
	if t.g.Rank() != 0 {
		return nil
	}
	commit := func() error { return nil }
	if t.c.summary != "" {
		tmp, err := stageSummary(t.c.summary, sum)
		if err != nil {
			return err
		}
		defer os.Remove(tmp) // gone once renamed
		commit = func() error {
			if err := os.Rename(tmp, t.c.summary); err != nil {
				return fmt.Errorf("--summary: %w", err)
			}
			return nil
		}
	}
	if t.c.saveDir != "" {
		if err := s.params.SaveNPYCard(t.c.saveDir, cardOf(s.spec, t.c, t.ds)); err != nil { // card.go
			return fmt.Errorf("--save: %w", err)
		}
	}
	return commit()
}

// stageSummary writes the summary's JSON into a synced temporary file
// beside path and returns its name.
func stageSummary(path string, s any) (string, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".summary-*")
	if err != nil {
		return "", fmt.Errorf("--summary: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("--summary: %w", err)
	}
	return f.Name(), nil
}
