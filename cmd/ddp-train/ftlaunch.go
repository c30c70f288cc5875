package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/ft"
)

// Note [the fault-tolerant launcher]: `ddp-train --fault-tolerant --nproc
// R` serves a lighthouse (or uses --lighthouse's) and starts R replica
// processes, each the same command line with GODDP_FT_REPLICA_ID set. A
// replica that dies (any exit but success, bad input or divergence) is
// started again after --restart-backoff, fresh: it joins the next quorum
// at step 0 and heals from a peer, while the others go on. --max-restarts,
// when given, bounds the restarts of each replica; otherwise there is no
// bound. Once a replica has committed the last step, no replica is
// restarted; the others get --ft-timeout to finish too and are then
// stopped (SIGTERM, SIGKILL 5 s later). The outputs are the first
// finished replica's (by id); the run fails if the finished replicas'
// parameter digests differ, or if their --ft-record lines disagree about a
// step or leave a batch out or in twice.

// runFTLauncher runs a fault-tolerant job (Note [the fault-tolerant
// launcher]).
func runFTLauncher(ctx context.Context, c config, args []string, lookup func(string) (string, bool), stdout,
	stderr io.Writer) error {
	info, err := dataInfo(c)
	if err != nil {
		return err
	}
	if err := checkInit(c, info); err != nil {
		return err
	}
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	if err := checkOutputs(c, true); err != nil { // Note [outputs only on success]
		return err
	}
	secretHex, ok := lookup("GODDP_SECRET")
	if !ok || secretHex == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b) // crypto/rand never fails
		secretHex = hex.EncodeToString(b)
	}
	secret, err := ft.DecodeSecret(secretHex)
	if err != nil {
		return usageError{err}
	}
	host, _, err := net.SplitHostPort(c.listenAddr)
	if err != nil {
		host = "127.0.0.1"
	}
	lh, prefix := c.ftLighthouse, ""
	if lh == "" {
		o := ft.DefaultOptions(c.ftMinReplicas)
		o.JoinTimeout, o.HeartbeatTimeout, o.Logger = c.ftJoin, c.ftHeartbeat, logger.Named("lighthouse")
		srv, err := ft.NewServer(ctx, net.JoinHostPort(host, "0"), secret, o)
		if err != nil {
			return err
		}
		defer srv.Close()
		lh = srv.Addr()
	} else if prefix, err = os.Hostname(); err != nil { // replica ids unique across the machines
		return err
	}
	out, err := os.MkdirTemp("", "ddp-train-ft-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	sup := &ftSupervisor{c: c, exe: exe, args: args, out: out, log: logger, stdout: stdout, stderr: stderr,
		env:      append(os.Environ(), "GODDP_SECRET="+secretHex, ftLighthouseEnv+"="+lh, ftOutEnv+"="+out),
		idPrefix: prefix, doneCh: make(chan struct{})}
	logger.Info("fault-tolerant run", zap.Int("replicas", c.nproc), zap.String("lighthouse", lh),
		zap.Int("min_replicas", c.ftMinReplicas))
	if err := sup.run(ctx); err != nil {
		return err
	}
	return sup.collect()
}

// ftSupervisor starts, watches and restarts the replica processes.
type ftSupervisor struct {
	c              config
	exe            string
	args, env      []string
	out, idPrefix  string
	log            *zap.Logger
	stdout, stderr io.Writer

	mu       sync.Mutex
	done     bool
	doneCh   chan struct{} // closed when the first replica finishes
	finished []string
	restarts int
}

func (s *ftSupervisor) id(i int) string {
	if s.idPrefix != "" {
		return fmt.Sprintf("%s_replica_%d", s.idPrefix, i)
	}
	return fmt.Sprintf("replica_%d", i)
}

// run runs every replica until one finishes and the others have finished
// or been stopped; its error is one that restarting cannot mend.
func (s *ftSupervisor) run(ctx context.Context) error {
	errs := make([]error, s.c.nproc)
	var wg sync.WaitGroup
	for i := range s.c.nproc {
		wg.Go(func() { errs[i] = s.replica(ctx, i) })
	}
	wg.Wait()
	if len(s.finished) > 0 {
		return nil
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return errors.New("--fault-tolerant: no replica finished")
}

// replica keeps replica i running until the run is done.
func (s *ftSupervisor) replica(ctx context.Context, i int) error {
	id := s.id(i)
	var wait time.Duration // before the first restart: --restart-backoff (restartWait)
	for life := 0; ; life++ {
		began := time.Now()
		code, err := s.once(ctx, id, i, life)
		if code == 0 {
			s.finish(id)
			return nil
		}
		if s.isDone() || ctx.Err() != nil {
			return nil
		}
		if code == exitWorkerUsage || code == 2 || code == exitDiverged {
			return fmt.Errorf("--fault-tolerant: replica %s exited %d (bad input or divergence does not heal): %v", id,
				code, err)
		}
		if s.c.maxRestarts > 0 && life >= s.c.maxRestarts {
			return fmt.Errorf("--fault-tolerant: replica %s died %d times (--max-restarts %d)", id, life+1,
				s.c.maxRestarts)
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		s.log.Warn("a replica died; starting it again (it heals from a peer)", zap.String("replica_id", id),
			zap.Int("exit_code", code), zap.Int("restart", life+1))
		wait = restartWait(wait, s.c.restartBackoff, time.Since(began))
		select {
		case <-time.After(wait):
		case <-s.doneCh:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// maxRestartWait caps the wait before a replica's restart.
const maxRestartWait = 30 * time.Second

// restartWait is the wait before restarting a replica that died after
// living lived, its previous wait being last (zero before the first
// restart) and --restart-backoff base: Note [restart backoff].
//
// Note [restart backoff]: a replica that dies again soon after a restart
// waits twice as long each time, up to 30 s, so that one that cannot start
// does not spin. A replica that lived at least 30 s was healthy, and its
// death is a new failure, not the same one again: it waits base, as a
// first failure does (Kubernetes resets a crash loop's backoff after a
// healthy run in the same way). Without the reset, a chaos run that kills
// a replica every 15 s drove each replica's wait to the cap within
// minutes, and the mean participants fell from 3.5 of 4 in the first
// quarter of the run to 2.0 in the last (docs/fault-tolerance.md, "Chaos
// runs").
func restartWait(last, base, lived time.Duration) time.Duration {
	if last == 0 || lived >= maxRestartWait {
		return base
	}
	return min(2*last, maxRestartWait)
}

// once runs one life of replica id and returns its exit code (-1 for a
// signal).
func (s *ftSupervisor) once(ctx context.Context, id string, i, life int) (int, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, s.exe, s.args...)
	cmd.Env = append(slices.Clone(s.env), ftReplicaEnv+"="+id, fmt.Sprintf("GODDP_FT_LIFE=%d", life))
	cmd.Stdout, cmd.Stderr = io.Discard, s.stderr
	if i == 0 {
		cmd.Stdout = s.stdout
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	stop := make(chan struct{})
	go func() { // once the run is done, the others get half a heartbeat timeout: Note [the end of a run]
		select {
		case <-s.doneCh:
			select {
			case <-time.After(s.c.ftHeartbeat / 2):
				cancel()
			case <-stop:
			}
		case <-stop:
		}
	}()
	err := cmd.Wait()
	close(stop)
	return cmd.ProcessState.ExitCode(), err
}

func (s *ftSupervisor) finish(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, id)
	if !s.done {
		s.done = true
		close(s.doneCh)
	}
}

func (s *ftSupervisor) isDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// collect checks the finished replicas against each other and writes
// the run's outputs from the first of them.
func (s *ftSupervisor) collect() error {
	sort.Strings(s.finished)
	sums := make([]summary, len(s.finished))
	for k, id := range s.finished {
		b, err := os.ReadFile(filepath.Join(s.out, id, "summary.json"))
		if err == nil {
			err = json.Unmarshal(b, &sums[k])
		}
		if err != nil {
			return fmt.Errorf("--fault-tolerant: replica %s finished without its summary: %w", id, err)
		}
		if sums[k].StateDigest != sums[0].StateDigest {
			return fmt.Errorf("--fault-tolerant: replicas %s and %s finished with different parameters or optimizer "+
				"states (digests %s and %s): a bug; please report it", s.finished[0], id, sums[0].StateDigest,
				sums[k].StateDigest)
		}
		if sums[k].CommitChain != sums[0].CommitChain {
			return fmt.Errorf("--fault-tolerant: replicas %s and %s finished on different commit chains (%s and %s): "+
				"a bug; please report it", s.finished[0], id, sums[0].CommitChain, sums[k].CommitChain)
		}
	}
	lines, err := mergeRecords(s.out, sums[0].CommitChain)
	if err != nil {
		return err
	}
	sum := sums[0]
	sum.ReplicaRestarts, sum.ReplicasFinished, sum.WorldSize = s.restarts, len(s.finished), s.c.nproc
	s.log.Info("fault-tolerant run done", zap.Strings("finished", s.finished), zap.Int("restarts", s.restarts),
		zap.Int64("committed_steps", sum.CommittedSteps), zap.Int64("discarded_steps", sum.DiscardedSteps),
		zap.Float64("participants_mean", sum.ParticipantsMean), zap.String("param_digest", sum.ParamDigest))
	if s.c.ftRecord != "" {
		if err := writeRecord(s.c.ftRecord, lines); err != nil {
			return err
		}
	}
	if s.c.saveDir != "" {
		if err := copyDir(filepath.Join(s.out, s.finished[0], "model"), s.c.saveDir); err != nil {
			return fmt.Errorf("--save: %w", err)
		}
	}
	if s.c.summary != "" {
		tmp, err := stageSummary(s.c.summary, sum)
		if err != nil {
			return err
		}
		return os.Rename(tmp, s.c.summary)
	}
	return nil
}

// mergeRecords reads every replica life's record lines and follows the
// commit chain back from end, the finished replicas' last commit (Note
// [the commit chain], package ft): a step a replica committed on a history
// that lost (it then healed) is not the run's. It checks that lines of one
// commit agree and that the steps' batches follow each other with none
// left out or taken twice.
func mergeRecords(out, end string) ([]ftRecordLine, error) {
	by, err := readRecords(out)
	if err != nil {
		return nil, err
	}
	var lines []ftRecordLine
	for c := end; c != ""; {
		l, ok := by[c]
		if !ok {
			return nil, fmt.Errorf("--fault-tolerant: no replica recorded the commit %s, %d steps before the end", c,
				len(lines))
		}
		lines = append(lines, l)
		c = l.Parent
	}
	slices.Reverse(lines)
	next := 0
	for i, l := range lines {
		if l.Step != int64(i+1) {
			return nil, fmt.Errorf("--fault-tolerant: the commit chain's step %d is recorded as step %d", i+1, l.Step)
		}
		if l.FirstBatch != next {
			return nil, fmt.Errorf("--fault-tolerant: step %d took batches from %d, but the steps before it ended at %d",
				l.Step, l.FirstBatch, next)
		}
		next += len(l.Participants) * max(l.BatchesEach, 1)
	}
	return lines, nil
}

// readRecords is every record line of every replica life, by commit.
func readRecords(out string) (map[string]ftRecordLine, error) {
	files, _ := filepath.Glob(filepath.Join(out, "*", "record-*.jsonl"))
	by := map[string]ftRecordLine{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var l ftRecordLine
			if err := json.Unmarshal(line, &l); err != nil {
				return nil, fmt.Errorf("--fault-tolerant: %s: %w", f, err)
			}
			if old, ok := by[l.Chain]; ok && (old.Step != l.Step || old.FirstBatch != l.FirstBatch ||
				!slices.Equal(old.Participants, l.Participants)) {
				return nil, fmt.Errorf("--fault-tolerant: the replicas disagree about the commit %s: %+v and %+v",
					l.Chain, old, l)
			}
			by[l.Chain] = l
		}
	}
	return by, nil
}

func writeRecord(path string, lines []ftRecordLine) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--ft-record: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			f.Close()
			return fmt.Errorf("--ft-record: %w", err)
		}
	}
	return f.Close()
}

// copyDir copies the plain files of src into dst, which it makes.
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
