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
//     --timeline a directory it can make. A worker under an external
//     launcher checks the paths its rank writes before the rendezvous.
//   - --save and --summary are written only at the end of a run whose
//     parameters passed the non-finite guard, each atomically; the summary
//     is written to a temporary file first, so a failure of either leaves
//     the other's old contents, and a failed run leaves both as they were.
//
// Note [checkpoint directories are owned]
//
// A run never deletes or overwrites checkpoints it did not write. Without
// --resume, a --checkpoint directory that already holds checkpoints is
// refused (exit 2) unless --overwrite-checkpoints says to delete them and
// start over. One run per directory at a time: the launcher (or, under an
// external launcher, rank 0) holds checkpoint.Lock for the whole run, and
// a second run is refused at once naming the holder.
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
// (rank0), or only --timeline. Errors are usage errors (exit 2).
func checkOutputs(c config, rank0 bool) error {
	if c.timeline != "" {
		if err := checkDirPath("--timeline", c.timeline); err != nil {
			return err
		}
	}
	if !rank0 {
		return nil
	}
	if c.saveDir != "" {
		if err := checkDirPath("--save", c.saveDir); err != nil {
			return err
		}
	}
	if c.checkpointDir != "" {
		if err := checkDirPath("--checkpoint", c.checkpointDir); err != nil {
			return err
		}
	}
	if c.summary != "" {
		if err := checkFilePath("--summary", c.summary); err != nil {
			return err
		}
	}
	return nil
}

// checkDirPath: path is a directory or absent, and the nearest directory
// above it that exists can be written.
func checkDirPath(flagName, path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.IsDir():
		return usagef("%s %s: it is a file, not a directory", flagName, path)
	case err == nil:
		return writable(flagName, path, path)
	case !errors.Is(err, fs.ErrNotExist):
		return usagef("%s %s: %v", flagName, path, err)
	}
	for dir := filepath.Dir(filepath.Clean(path)); ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return usagef("%s %s: %s is a file, so the directory cannot be made", flagName, path, dir)
			}
			return writable(flagName, path, dir)
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
	return writable(flagName, path, dir)
}

// writable checks that a file can be made in dir, by making one.
func writable(flagName, path, dir string) error {
	f, err := os.CreateTemp(dir, ".ddp-train-probe-*")
	if err != nil {
		return usagef("%s %s: cannot write in %s: %v", flagName, path, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
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
		return nil, usagef("--resume continues the checkpoints in %s and --overwrite-checkpoints deletes them; choose one", c.checkpointDir)
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
		return nil, usagef("--checkpoint %s already holds %s, which this run did not write and would replace; continue that run with --resume, or pass --overwrite-checkpoints to delete them and start over", c.checkpointDir, what)
	}
	log.Warn("--overwrite-checkpoints: deleting the checkpoints already in the directory", zap.String("checkpoint", c.checkpointDir), zap.String("deleting", what))
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
		"model":               fmt.Sprintf("%s hidden=%s activation=%s dtype=%s", c.model, strings.Join(hidden, ","), c.activation, c.dtype),
		"shuffle":             strconv.FormatBool(c.shuffle),
		"data":                t.dataSum,
	}
}

// metaFields are runMeta's keys, in the order mismatches are reported.
var metaFields = []string{"world_size", "seed", "batch_size", "grad_accum", "optimizer", "lr", "comm_hook", "powersgd_start_iter", "model", "shuffle", "data"}

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
		return usagef("--resume would change the run it continues: %s; resume with the same settings, or name the fields you mean to change in --resume-allow-changes (%s)",
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
			return usagef("--resume-allow-changes %q: %q is not a setting a checkpoint records; choose from %s", list, f, strings.Join(metaFields, ","))
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
		if err := s.params.SaveNPY(t.c.saveDir); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
	}
	return commit()
}

// stageSummary writes the summary's JSON into a synced temporary file
// beside path and returns its name.
func stageSummary(path string, s summary) (string, error) {
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
