package launch

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Interrupted is the cause to cancel Run's ctx with when the launcher got
// a signal: Run forwards Signal to every worker, instead of SIGTERM, and
// its error wraps the cause.
type Interrupted struct{ Signal syscall.Signal }

func (e *Interrupted) Error() string { return "interrupted by " + SignalName(e.Signal) }

// ExitCode is the shell's convention for a process ended by Signal:
// 128+Signal (130 for SIGINT, 143 for SIGTERM).
func (e *Interrupted) ExitCode() int { return 128 + int(e.Signal) }

// SignalName is "SIGTERM", "SIGINT" or "signal N".
func SignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return "signal " + strconv.Itoa(int(s))
}

// StoppedBySignal reports whether err is, or wraps, a worker's exit with
// status 128+SIGINT or 128+SIGTERM: the convention for a worker that
// caught the signal and stopped on purpose (a preemption, not a crash).
func StoppedBySignal(err error) (syscall.Signal, bool) {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 0, false
	}
	switch sig := syscall.Signal(exit.ExitCode() - 128); sig {
	case syscall.SIGINT, syscall.SIGTERM:
		return sig, true
	}
	return 0, false
}

// Elastic is the restart policy of RunElastic, torchrun's --max_restarts.
type Elastic struct {
	// MaxRestarts is how many times the whole job may be restarted after
	// a worker fails; 0 never restarts.
	MaxRestarts int
	// Backoff is the wait before the first restart, doubled before each
	// next one up to MaxBackoff (default 30s). 0 restarts at once.
	Backoff, MaxBackoff time.Duration
	// Grace is each attempt's Spec.Grace when that is 0.
	Grace time.Duration
	// Settle is each attempt's Spec.Settle when that is 0.
	Settle time.Duration
	// Retry, if set, decides whether a failure may be restarted at all
	// (e.g. not a worker that exited on bad input). nil: every failure.
	Retry func(*WorkerError) bool
	// Logger logs each restart; nil logs nothing.
	Logger *zap.Logger
	// EveryStdout is each attempt's Spec.EveryStdout.
	EveryStdout bool
	// Env and ExtraFiles are added to every attempt's Spec by
	// SelfElastic and ProgramElastic (RunElastic's newSpec builds its own).
	Env        []string
	ExtraFiles []*os.File
	// Hidden is each attempt's Spec.Hidden.
	Hidden string
	// StoppedStacks is each attempt's Spec.StoppedStacks.
	StoppedStacks func(rank int) (io.WriteCloser, error)
	// Crashed is each attempt's Spec.Crashed.
	Crashed func(rank int) (io.WriteCloser, error)
	// Node, when set, makes the workers of ProgramElastic and SelfElastic
	// one node's share of a job of several machines, instead of the
	// whole job on loopback.
	Node *Node
}

// Node is this machine's place in a job of several, each machine
// started by a launcher of its own with the same Nodes, MasterAddr,
// MasterPort and Secret, and its own Rank: torchrun's static rendezvous
// (--nnodes, --node_rank, --master_addr, --master_port). Global rank 0,
// the first worker of node 0, serves the store at MasterAddr:MasterPort.
// There is no agent between the nodes, so a restart (MaxRestarts) could
// not bring the other nodes' workers back: callers refuse restarts with
// a Node.
type Node struct {
	Nodes, Rank int // how many machines, and this one's index (0 to Nodes-1)
	MasterAddr  string
	MasterPort  int
	Secret      string // the job's GODDP_SECRET, the same on every machine
}

// env is the rendezvous environment of a node's n workers.
func (nd *Node) env(n int) []string {
	return []string{
		"MASTER_ADDR=" + nd.MasterAddr,
		"MASTER_PORT=" + strconv.Itoa(nd.MasterPort),
		"WORLD_SIZE=" + strconv.Itoa(nd.Nodes*n),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(n),
		"GROUP_RANK=" + strconv.Itoa(nd.Rank),
		"GODDP_SECRET=" + nd.Secret,
	}
}

// backoff is the wait before restart k (1 for the first).
func (e Elastic) backoff(k int) time.Duration {
	limit := e.MaxBackoff
	if limit <= 0 {
		limit = 30 * time.Second
	}
	d := e.Backoff
	for i := 1; i < k && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// RunElastic runs a job, and when a worker fails, runs it again from the
// start, up to e.MaxRestarts times: newSpec(attempt) builds each
// attempt's Spec (attempt 0 is the first; each attempt should have a
// fresh rendezvous: a new port, a new secret). As torchrun does, every
// worker is stopped and every worker restarted; resuming from a
// checkpoint is the workers' business (TORCHELASTIC_RESTART_COUNT tells
// them, see SelfElastic).
//
// It does not restart when ctx ends (the launcher was interrupted), when
// a worker exited with 128+SIGINT or 128+SIGTERM (it was preempted and
// stopped on purpose, see StoppedBySignal), or when e.Retry refuses. Its
// error is the last attempt's *WorkerError, with Attempt set.
func RunElastic(ctx context.Context, e Elastic, newSpec func(attempt int) (Spec, error)) error {
	log := e.Logger
	if log == nil {
		log = zap.NewNop()
	}
	for attempt := 0; ; attempt++ {
		spec, err := newSpec(attempt)
		if err != nil {
			return err
		}
		if spec.Grace == 0 {
			spec.Grace = e.Grace
		}
		if spec.Settle == 0 {
			spec.Settle = e.Settle
		}
		err = Run(ctx, spec)
		var we *WorkerError
		if !errors.As(err, &we) {
			return err
		}
		we.Attempt = attempt
		if _, stopped := StoppedBySignal(we.Err); stopped || ctx.Err() != nil ||
			attempt >= e.MaxRestarts || (e.Retry != nil && !e.Retry(we)) {
			return err
		}
		wait := e.backoff(attempt + 1)
		log.Warn("worker failed; restarting every worker",
			zap.Int("restart", attempt+1), zap.Int("max_restarts", e.MaxRestarts),
			zap.Int("failed_rank", we.Rank), zap.String("error", we.Err.Error()),
			zap.String("last_line", lastLine(we.Tail)), zap.Duration("backoff", wait))
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return &WorkerError{Rank: we.Rank, Err: context.Cause(ctx), Attempt: attempt}
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	for len(s) > 0 {
		i := len(s) - 1
		for i >= 0 && s[i] != '\n' {
			i--
		}
		if line := s[i+1:]; line != "" {
			return line
		}
		s = s[:max(i, 0)]
	}
	return ""
}

// SelfElastic is Self with restarts: each attempt gets a fresh
// rendezvous (StandaloneEnv: a new port and a new secret), and its
// workers the variables torchrun sets for them: TORCHELASTIC_RESTART_COUNT
// (the attempt: 0, then 1, 2, ...), TORCHELASTIC_MAX_RESTARTS and
// TORCHELASTIC_RUN_ID (one per SelfElastic call).
func SelfElastic(ctx context.Context, n int, args []string, marker string, stdout, stderr io.Writer, e Elastic) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return ProgramElastic(ctx, n, self, args, []string{marker}, stdout, stderr, e)
}

// ProgramElastic is SelfElastic for any program: n copies of path with
// args, each with the rendezvous environment (StandaloneEnv, a fresh one
// per attempt, or e.Node's), the torchrun variables a restart sets, and extra. It is
// how ddp-train --nproc N starts a program of one's own, which joins the
// job with dist.InitProcessGroup.
func ProgramElastic(ctx context.Context, n int, path string, args, extra []string, stdout, stderr io.Writer,
	e Elastic) error {
	runID, err := NewSecret()
	if err != nil {
		return err
	}
	runID = runID[:16]
	base := os.Environ()
	return RunElastic(ctx, e, func(attempt int) (Spec, error) {
		jobEnv, rankBase := []string(nil), 0
		if e.Node != nil {
			jobEnv, rankBase = e.Node.env(n), e.Node.Rank*n
		} else {
			var err error
			if jobEnv, err = StandaloneEnv(n); err != nil {
				return Spec{}, err
			}
		}
		env := append(append(append(append([]string(nil), base...), jobEnv...), extra...),
			"TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(attempt),
			"TORCHELASTIC_MAX_RESTARTS="+strconv.Itoa(e.MaxRestarts),
			"TORCHELASTIC_RUN_ID="+runID)
		env = append(env, e.Env...)
		return Spec{N: n, RankBase: rankBase, Path: path, Args: args, Env: env, Stdout: stdout, Stderr: stderr,
			ExtraFiles: e.ExtraFiles, EveryStdout: e.EveryStdout, Hidden: e.Hidden, StoppedStacks: e.StoppedStacks,
			Crashed: e.Crashed}, nil
	})
}
