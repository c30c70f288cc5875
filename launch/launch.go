package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Spec describes a job of N worker processes on this machine.
type Spec struct {
	N    int      // number of workers on this machine
	Path string   // program to run
	Args []string // its arguments (without the program name)
	Env  []string // environment common to all workers ("K=V")
	// RankBase is the global rank of the first worker: worker i gets
	// RANK=RankBase+i and LOCAL_RANK=i, and errors and output prefixes
	// name global ranks. 0 on one machine; a node of a job of several
	// (Node) starts its workers at Node.Rank*N.
	RankBase int
	// Stdout receives rank 0's standard output; other ranks' output is
	// discarded unless EveryStdout is set. nil discards.
	Stdout io.Writer
	// EveryStdout sends every rank's standard output to Stdout, each line
	// prefixed with its rank, as torchrun's --tee does: for a program of
	// one's own, whose ranks each have something to say.
	EveryStdout bool
	// Stderr receives every worker's standard error, each line
	// prefixed with its rank. nil discards (the tail is still kept for
	// errors).
	Stderr io.Writer
	// Grace is how long a stopped worker gets between SIGTERM (or the
	// signal Run forwards) and SIGKILL.
	Grace time.Duration
	// ExtraFiles are open files every worker inherits, as file
	// descriptors 3, 4, ... (exec.Cmd.ExtraFiles): ddp-train's workers
	// send their progress to the launcher through one.
	ExtraFiles []*os.File
	// Settle is how long, after the first worker fails, the others get
	// to end on their own before they are stopped, so that the error
	// holds every failure (WorkerError.Failures) and the caller can name
	// the root cause rather than whichever worker exited first: Note
	// [first is not the cause]. 0 stops them at once.
	Settle time.Duration
	// Hidden, when set, keeps a worker's stderr lines that start with it
	// out of Stderr; WorkerError's tails still hold them. A worker writes
	// such a line for its launcher (ddp-train: its verdict on a failure),
	// not for the user; a line written in pieces may still show.
	Hidden string
	// StoppedStacks, when set, takes the goroutine stacks of a worker
	// found stopped (SIGSTOP) before it is killed: the worker is sent
	// SIGQUIT and then SIGCONT, so that the Go runtime prints its stacks
	// and exits, and its stderr from then on goes to the writer
	// StoppedStacks(rank) returns (closed when the worker has ended)
	// instead of Stderr; it is killed after StoppedGrace if still up.
	// Without it, or if it fails, a stopped worker is killed at once:
	// Note [a stopped worker is killed].
	StoppedStacks func(rank int) (io.WriteCloser, error)
	// Crashed, when set, takes a worker's Go runtime crash report (Note
	// [a crash report is diverted]): from the first stderr line that
	// starts one, the worker's stderr goes to the writer Crashed(rank)
	// opens (closed when the worker has ended) instead of Stderr and the
	// tail, which keep only that line. Without it, or if it fails, the
	// report goes to Stderr as any other output.
	Crashed func(rank int) (io.WriteCloser, error)
}

// Note [a crash report is diverted]: a Go program that panics, runs out
// of memory or hits a fatal error prints its goroutines' stacks, hundreds
// of lines, and exits with status 2. For a launcher's user those lines
// bury the one that says what happened, so with Spec.Crashed a worker's
// stderr is watched for the line a crash report starts with (crashStart:
// "panic: ", "fatal error: ", "runtime: ", "runtime/cgo: ", or a signal's
// name such as "SIGSEGV: "), at the start of a line; that line is kept in
// the tail, for the launcher's error, and it and all that follows go to
// the crash writer. The runtime writes the start of each line in one
// write(2), so the line is seen whole unless a read of the pipe ends
// inside it (over 32 KiB queued); then the report shows as it is. A stopped
// worker's stacks (Spec.StoppedStacks) are diverted already and stay so.

// StoppedGrace is how long a stopped worker sent SIGQUIT
// (Spec.StoppedStacks) has to print its stacks and exit.
const StoppedGrace = 2 * time.Second

// WorkerError reports the first worker that failed.
type WorkerError struct {
	Rank    int
	Err     error
	Tail    string // the last lines the worker wrote to stderr
	Attempt int    // RunElastic's attempt it failed in: 0 for the first, k after k restarts
	// Failures are the workers that failed on their own, the first
	// included, in the order they ended (within Spec.Settle of the
	// first); not those the launcher stopped.
	Failures []Failure
	// Stopped are the workers the launcher stopped, in the order they
	// ended, with their tails: what they said as they went may still
	// name the cause.
	Stopped []Failure
	// Frozen are the ranks whose process was stopped (SIGSTOP, or a
	// debugger's stop) when the launcher came to stop it, ascending: it
	// killed them, as Note [a stopped worker is killed] says.
	Frozen []int
}

// Failure is one worker's failure, or how a stopped worker ended.
type Failure struct {
	Rank int
	Err  error
	Tail string
}

// Note [first is not the cause]: when one worker fails, its peers fail
// too, as their collectives lose it, and one of them often exits first:
// the rank that could not write its checkpoint exits a moment after the
// rank whose store it hosted reports "the store did not answer". Run
// therefore waits up to Spec.Settle for the others to end by themselves,
// and keeps every failure, so the caller can pick the one that is a cause
// (ddp-train: a worker whose error did not come from a peer).

func (e *WorkerError) Error() string {
	msg := fmt.Sprintf("worker rank %d failed: %v", e.Rank, e.Err)
	if e.Tail != "" {
		msg += "\n" + e.Tail
	}
	return msg
}

func (e *WorkerError) Unwrap() error { return e.Err }

// NewSecret returns a fresh hex-encoded 32-byte job secret.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// FreePort asks the kernel for a free TCP port on loopback. Another
// process may take it before it is used; rendezvous retries cover that
// rare case poorly, so callers use it only on a single machine.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StandaloneEnv returns the rendezvous environment of a single-machine job:
// loopback master, a free port and a fresh secret.
func StandaloneEnv(n int) ([]string, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	secret, err := NewSecret()
	if err != nil {
		return nil, err
	}
	return []string{
		"MASTER_ADDR=127.0.0.1",
		"MASTER_PORT=" + strconv.Itoa(port),
		"WORLD_SIZE=" + strconv.Itoa(n),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(n),
		"GODDP_SECRET=" + secret,
	}, nil
}

// Run starts spec.N workers and waits for all of them. When ctx ends or a
// worker fails, the remaining workers are terminated (SIGTERM, then
// SIGKILL after spec.Grace), and the error names the first failed rank.
// When ctx was cancelled with an *Interrupted cause, its signal is
// forwarded to the workers instead of SIGTERM, and the error wraps it.
// When ctx ends, or a worker cannot be started, before all of them have
// been, Run starts no more, kills those it started and returns once they
// are gone (Note [stopping mid-spawn]); the error wraps ctx's cause.
//
// Each worker runs in a session (and process group) of its own, as
// torchrun's do, so that a Ctrl-C in the terminal reaches the launcher
// only, which forwards it once: a worker never gets the same interrupt
// twice. Signals go to the worker's whole process group, so processes it
// started stop with it.
func Run(ctx context.Context, spec Spec) error {
	if spec.Path == "" {
		return ErrNoWorkers
	}
	if spec.N < 1 {
		return fmt.Errorf("launch: need at least one worker, got %d", spec.N)
	}
	if spec.Grace == 0 {
		spec.Grace = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers, err := spawn(ctx, spec)
	if err != nil {
		return err
	}
	return supervise(ctx, spec, workers)
}

// spawn starts spec.N workers, or none: when ctx ends or a worker cannot be
// started, it kills those it started (Note [stopping mid-spawn]).
func spawn(ctx context.Context, spec Spec) ([]*worker, error) {
	var stderrMu sync.Mutex // the workers share spec.Stderr
	workers := make([]*worker, 0, min(spec.N, 1024))
	for r := range spec.N {
		if ctx.Err() != nil { // a signal, mid-spawn: Note [stopping mid-spawn]
			kill(workers)
			return nil, fmt.Errorf("launch: stopped after starting %d of %d workers: %w", r, spec.N, context.Cause(ctx))
		}
		w, err := start(spec, r, &stderrMu)
		if err != nil {
			kill(workers)
			return nil, &WorkerError{Rank: spec.RankBase + r, Err: err}
		}
		workers = append(workers, w)
	}
	return workers, nil
}

// exit is one worker's end: its rank and what Wait returned.
type exit struct {
	rank int
	err  error
}

// supervisor is Run's state while it waits for its workers.
type supervisor struct {
	spec    Spec
	workers []*worker
	first   *WorkerError
	settle  <-chan time.Time // after the first failure: Note [first is not the cause]
	poll    <-chan time.Time // while settling: are the ones left all stopped?
	stopped bool             // every worker has been told to stop
	frozen  []int            // ranks found stopped (SIGSTOP) and killed
	ended   []bool           // by rank: its exit has been taken in
}

// supervise waits for every worker. The first failure stops the rest
// (after spec.Settle), and so does ctx's end, with the signal it carries.
func supervise(ctx context.Context, spec Spec, workers []*worker) error {
	exits := make(chan exit, spec.N)
	for r, w := range workers {
		go func() {
			err := w.cmd.Wait()
			w.stderr.close() // Wait copied the last of its stderr
			w.exited.Store(true)
			exits <- exit{r, err}
		}()
	}
	s := &supervisor{spec: spec, workers: workers, ended: make([]bool, spec.N)}
	for left := spec.N; left > 0; {
		select {
		case e := <-exits:
			s.ended[e.rank] = true
			s.exited(e)
			left--
		case <-s.poll:
			if s.onlyFrozenLeft() {
				s.endSettle()
			}
		case <-s.settle:
			s.endSettle()
		case <-ctx.Done():
			s.stopAll(interruptSignal(ctx))
			s.stopped = true
			e := <-exits
			s.ended[e.rank] = true
			left--
			if s.first == nil {
				s.first = &WorkerError{Rank: e.rank, Err: context.Cause(ctx), Tail: s.workers[e.rank].tail.String()}
			}
		}
	}
	if s.first != nil {
		s.first.Frozen = s.frozen
		s.first.shift(spec.RankBase)
		return s.first
	}
	return nil
}

// shift turns the workers' indexes on this machine into global ranks.
func (e *WorkerError) shift(base int) {
	if base == 0 {
		return
	}
	e.Rank += base
	for _, fs := range [][]Failure{e.Failures, e.Stopped} {
		for i := range fs {
			fs[i].Rank += base
		}
	}
	for i := range e.Frozen {
		e.Frozen[i] += base
	}
}

// endSettle stops every worker still running.
func (s *supervisor) endSettle() {
	s.settle, s.poll, s.stopped = nil, nil, true
	s.stopAll(syscall.SIGTERM)
}

// onlyFrozenLeft reports whether every worker whose exit has not been
// taken in is stopped (SIGSTOP): none of them will end on its own, so
// settling is over. One that has exited but whose exit is still on its
// way is not stopped, so its failure is not mistaken for a consequence.
func (s *supervisor) onlyFrozenLeft() bool {
	for r, w := range s.workers {
		if !s.ended[r] && !w.frozen() {
			return false
		}
	}
	return true
}

// exited records a worker's end. Once the workers are being stopped, how
// each ends is a consequence, not a failure.
func (s *supervisor) exited(e exit) {
	f := Failure{Rank: e.rank, Err: e.err, Tail: s.workers[e.rank].tail.String()}
	if s.stopped && s.first != nil {
		s.first.Stopped = append(s.first.Stopped, f)
	}
	if e.err == nil || s.stopped {
		return
	}
	if s.first == nil {
		s.first = &WorkerError{Rank: f.Rank, Err: f.Err, Tail: f.Tail}
		if s.spec.Settle > 0 {
			s.settle = time.After(s.spec.Settle)
			s.poll = time.Tick(settlePoll)
		} else {
			s.stopped = true
			s.stopAll(syscall.SIGTERM)
		}
	}
	s.first.Failures = append(s.first.Failures, f)
}

func (s *supervisor) stopAll(sig syscall.Signal) {
	for r, w := range s.workers {
		if w.stop(sig, s.spec.Grace, s.spec.StoppedStacks) {
			s.frozen = append(s.frozen, r)
		}
	}
}

// settlePoll is how often a settling supervisor looks whether only
// stopped workers are left.
const settlePoll = 100 * time.Millisecond

// Note [a stopped worker is killed]: a process stopped by SIGSTOP (or
// SIGTSTP, or a debugger) keeps SIGTERM pending until it is continued, so
// the grace period would run out in full (30 s in ddp-train) before its
// SIGKILL, and the job would end that much after its peers had reported
// it. A stopped worker cannot finish a step or write a checkpoint, so
// stop kills it at once, and the supervisor stops settling as soon as the
// workers left are all stopped: they will not end on their own. Whether a
// process is stopped comes from /proc/PID/stat (Linux; elsewhere no
// worker is ever found stopped, and the grace period applies).

// interruptSignal is the signal an *Interrupted cause of ctx carries, else
// SIGTERM.
func interruptSignal(ctx context.Context) syscall.Signal {
	var in *Interrupted
	if errors.As(context.Cause(ctx), &in) {
		return in.Signal
	}
	return syscall.SIGTERM
}

// Note [stopping mid-spawn]: starting a worker is a fork and an exec,
// milliseconds each, so a job of many workers takes a while to start, and
// a signal must stop it at once rather than after the last one. Run checks
// ctx before each start. Until every worker has started none can be past
// its rendezvous, which needs every rank, so no work can be lost: the ones
// started are killed (SIGKILL, to their process groups) without a grace
// period, and reaped before Run returns, so that none outlives the
// launcher.

// kill ends workers that were started before the job could begin, and
// waits for them.
func kill(workers []*worker) {
	for _, w := range workers {
		w.signalGroup(syscall.SIGKILL)
	}
	for _, w := range workers {
		_ = w.cmd.Wait() // killed: the error says so
		w.exited.Store(true)
	}
}

type worker struct {
	rank   int // global: Spec.RankBase plus its index
	cmd    *exec.Cmd
	stderr *divertible // the tail and the console, or the stopped worker's stacks file
	tail   *tailBuffer
	once   sync.Once
	exited atomic.Bool // reaped: its pid, and so its process group id, may be reused
}

func start(spec Spec, rank int, stderrMu *sync.Mutex) (*worker, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	global := spec.RankBase + rank
	cmd.Env = append(append([]string(nil), spec.Env...),
		"RANK="+strconv.Itoa(global), "LOCAL_RANK="+strconv.Itoa(rank))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	cmd.ExtraFiles = spec.ExtraFiles
	switch {
	case spec.Stdout != nil && spec.EveryStdout:
		cmd.Stdout = &prefixWriter{mu: stderrMu, w: spec.Stdout, prefix: fmt.Sprintf("[rank %d] ", global)}
	case global == 0 && spec.Stdout != nil:
		cmd.Stdout = spec.Stdout
	}
	tail := &tailBuffer{max: 4096}
	var errOut io.Writer = tail
	if spec.Stderr != nil {
		errOut = io.MultiWriter(tail,
			&prefixWriter{mu: stderrMu, w: spec.Stderr, prefix: fmt.Sprintf("[rank %d] ", global), hidden: spec.Hidden})
	}
	stderr := &divertible{w: errOut}
	cmd.Stderr = stderr
	if spec.Crashed != nil {
		cmd.Stderr = &crashWatch{d: stderr, tail: tail, open: func() (io.WriteCloser, error) { return spec.Crashed(global) }}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &worker{rank: global, cmd: cmd, stderr: stderr, tail: tail}, nil
}

// stop sends sig (once: a worker may take a second signal as "stop now"),
// then SIGKILL after grace if the worker is still up. A stopped worker
// (Note [a stopped worker is killed]) is killed at once, or, with
// stacks (Spec.StoppedStacks), sent SIGQUIT and continued, its stderr
// diverted, and killed after StoppedGrace; stop then reports true.
func (w *worker) stop(sig syscall.Signal, grace time.Duration, stacks func(int) (io.WriteCloser, error)) (frozen bool) {
	w.once.Do(func() {
		p := w.cmd.Process
		if p == nil {
			return
		}
		if w.frozen() {
			frozen = true
			if stacks == nil || !w.divert(stacks) {
				w.signalGroup(syscall.SIGKILL)
				return
			}
			_ = p.Signal(syscall.SIGQUIT) // pending until it runs again: its first act
			w.signalGroup(syscall.SIGCONT)
			time.AfterFunc(StoppedGrace, func() { w.signalGroup(syscall.SIGKILL) })
			return
		}
		w.signalGroup(sig)
		time.AfterFunc(grace, func() { w.signalGroup(syscall.SIGKILL) })
	})
	return frozen
}

// divert sends the worker's stderr from now on to the writer stacks
// opens for its rank; it reports false if that fails.
func (w *worker) divert(stacks func(int) (io.WriteCloser, error)) bool {
	to, err := stacks(w.rank)
	if err != nil {
		return false
	}
	w.stderr.divert(to)
	return true
}

// frozen reports whether the worker's process is stopped (state T or t
// in /proc/PID/stat), and not yet reaped.
func (w *worker) frozen() bool {
	if w.exited.Load() || w.cmd.Process == nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndex(b, []byte(") ")) // the name may hold ") "; the state follows the last
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
}

// signalGroup sends sig to the worker's process group (its pid: Setsid
// made it the leader) until it has been reaped.
func (w *worker) signalGroup(sig syscall.Signal) {
	if !w.exited.Load() {
		_ = syscall.Kill(-w.cmd.Process.Pid, sig) // an error only means they all exited
	}
}

// divertible is a worker's stderr: w, until divert sends what follows
// elsewhere.
type divertible struct {
	mu       sync.Mutex
	w        io.Writer
	diverted io.WriteCloser
}

func (d *divertible) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.diverted != nil {
		return d.diverted.Write(p)
	}
	return d.w.Write(p)
}

// divertNew diverts to what open returns, unless output is diverted
// already; it reports whether it did.
func (d *divertible) divertNew(open func() (io.WriteCloser, error)) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.diverted != nil {
		return false
	}
	to, err := open()
	if err != nil {
		return false
	}
	d.diverted = to
	return true
}

// crashWatch is a worker's stderr with Spec.Crashed: Note [a crash
// report is diverted]. Only the goroutine copying the worker's stderr
// writes to it.
type crashWatch struct {
	d       *divertible
	tail    io.Writer
	open    func() (io.WriteCloser, error)
	midLn   bool
	crashed bool // diverted, or the diversion failed: the rest passes through
	first   bool // diverted, and the report's first line is still arriving: the tail takes it too
}

func (c *crashWatch) Write(p []byte) (int, error) {
	if c.crashed {
		c.firstLine(p)
		return c.d.Write(p)
	}
	for i := 0; i < len(p); {
		if !c.midLn && crashStart(p[i:]) {
			if _, err := c.d.Write(p[:i]); err != nil {
				return 0, err
			}
			c.crashed = true
			c.first = c.d.divertNew(c.open)
			c.firstLine(p[i:])
			if _, err := c.d.Write(p[i:]); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			c.midLn = true
			break
		}
		c.midLn = false
		i += j + 1
	}
	return c.d.Write(p)
}

// firstLine copies to the tail what p holds of the crash report's first
// line, which the runtime may write in pieces ("panic: ", then the value).
func (c *crashWatch) firstLine(p []byte) {
	if !c.first {
		return
	}
	line, _, ended := bytes.Cut(p, []byte("\n"))
	c.tail.Write(line)
	if ended {
		c.tail.Write([]byte("\n"))
		c.first = false
	}
}

// crashStart reports whether line starts a Go runtime crash report: one
// of the prefixes the runtime's crash reports start with, or a signal's
// name and a colon ("SIGSEGV: segmentation violation").
func crashStart(line []byte) bool {
	for _, p := range [...]string{"panic: ", "fatal error: ", "runtime: ", "runtime/cgo: "} {
		if bytes.HasPrefix(line, []byte(p)) {
			return true
		}
	}
	name, _, ok := bytes.Cut(line, []byte(": "))
	if !ok || len(name) < 4 || len(name) > 10 || !bytes.HasPrefix(name, []byte("SIG")) {
		return false
	}
	for _, b := range name[3:] {
		if b < 'A' || b > 'Z' {
			return false
		}
	}
	return true
}

func (d *divertible) divert(to io.WriteCloser) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.diverted = to
}

// close closes the writer output was diverted to, if any.
func (d *divertible) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.diverted != nil {
		d.diverted.Close()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// prefixWriter prefixes each line with a rank tag. The workers of a job
// share mu, and each line goes out in one Write (prefix included), so
// lines of different ranks never interleave.
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	hidden string // lines starting with it are dropped (Spec.Hidden)
	midLn  bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	var out []byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i+1]
		}
		if !p.midLn && i >= 0 && p.hidden != "" && bytes.HasPrefix(line, []byte(p.hidden)) {
			b = b[len(line):]
			continue
		}
		if !p.midLn {
			out = append(out, p.prefix...)
		}
		out = append(out, line...)
		p.midLn = i < 0
		b = b[len(line):]
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// ErrNoWorkers is returned when a Spec has no program.
var ErrNoWorkers = errors.New("launch: no program to run")
