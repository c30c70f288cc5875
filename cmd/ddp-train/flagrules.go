package main

// Flags that must mean what they say (Note [no flag is ignored]).
//
// Note [no flag is ignored]: a flag the run would not act on is a
// mistake the user cannot see, so parseFlags refuses it (exit 2) instead
// of running without it, and a default never silently overrides a flag
// the user gave:
//
//   - --epochs N without --steps trains N epochs: --steps' default (500)
//     applies only when neither is given. Both given and both non-zero is
//     refused, since one of them would be ignored (--steps 0 --epochs N
//     and --steps N --epochs 0 are fine).
//   - Flags only one backend acts on are refused with the others, naming
//     the backend (backendFlags): --listen-addr and --shm are the tcp
//     backend's (nccl moves data through NCCL, local through memory, mpi
//     through MPI); under --backend mpi, mpirun's -np sets the ranks, so
//     --nproc and --oversubscribe do nothing, and mpirun restarts nothing,
//     so neither does --max-restarts.
//   - Flags that only qualify another need it (flagNeeds):
//     --overwrite-checkpoints needs --checkpoint, --restart-backoff needs
//     --max-restarts (or --fault-tolerant), --classes needs --data (the synthetic set has its
//     own), --eval-every needs --eval-data (validateEval, eval.go).
//   - `ddp-train eval` refuses every flag that only training acts on
//     (asEvalCommand, evalcmd.go).
//   - --listen-addr is tried before any worker starts (checkListenAddr):
//     an address that is not this machine's, or a port in use, is exit 2
//     naming it, and so is a fixed port for more than one worker on this
//     machine (each would listen on it).
//
// Flags are "given" when the command line set them (config.setFlags), so
// --shm=true with --backend local is refused too: it says something the
// run will not do.

import (
	"errors"
	"net"
	"slices"
	"strings"
	"syscall"
)

// resolveSteps applies --epochs given without --steps: Note [no flag is
// ignored].
func (c *config) resolveSteps() {
	if c.given("epochs") && !c.given("steps") {
		c.steps = 0
	}
}

// given reports whether the command line set the flag name.
func (c config) given(name string) bool { return slices.Contains(c.setFlags, name) }

// backendFlags are the flags only some backends act on, with those backends.
var backendFlags = []struct {
	flag     string
	backends []string
	why      string
}{
	{"listen-addr", []string{"tcp"}, "only the tcp backend listens for its peers"},
	{"shm", []string{"tcp"}, "only the tcp backend moves data through shared memory"},
	{"nproc", []string{"tcp", "local", "nccl"}, "mpirun's -np sets the ranks"},
	{"oversubscribe", []string{"tcp", "local", "nccl"},
		"mpirun's -np sets the ranks (and mpirun has its own --oversubscribe)"},
	{"max-restarts", []string{"tcp", "nccl"}, "only ddp-train's own launcher restarts workers"},
}

// flagNeeds are flags that qualify another, which must be given too.
var flagNeeds = []struct{ flag, needs, why string }{
	{"overwrite-checkpoints", "checkpoint", "it deletes the checkpoints in --checkpoint DIR"},
	{"restart-backoff", "max-restarts", "it is the wait before a restart"},
	{"classes", "data", "the synthetic set has its own classes"},
}

// validateFlagUse checks Note [no flag is ignored].
func (c config) validateFlagUse() error {
	if c.steps > 0 && c.epochs > 0 {
		return usagef(
			"--steps %d and --epochs %d: give one of them (--epochs N alone trains N epochs; --steps N alone, N steps)", c.steps,
			c.epochs)
	}
	for _, f := range backendFlags {
		if c.given(f.flag) && !slices.Contains(f.backends, c.backend) {
			return usagef("--%s does nothing with --backend %s: %s; leave it out (it applies to --backend %s)", f.flag,
				c.backend, f.why, strings.Join(f.backends, ", "))
		}
	}
	for _, f := range flagNeeds {
		if f.flag == "restart-backoff" && c.faultTolerant {
			continue // the fault-tolerant launcher restarts replicas without --max-restarts (ftlaunch.go)
		}
		if c.given(f.flag) && !c.given(f.needs) {
			return usagef("--%s needs --%s: %s", f.flag, f.needs, f.why)
		}
	}
	return nil
}

// checkListenAddr tries --listen-addr on this machine before the run
// depends on it (Note [no flag is ignored]): workers is how many ranks of
// this machine will listen on it. Errors are usage errors (exit 2).
func checkListenAddr(addr string, workers int) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--listen-addr %q: want host:port", addr)
	}
	anyPort := net.JoinHostPort(host, "0")
	if err := tryListen(anyPort); err != nil { // the host first: is it this machine's?
		return listenAddrError(addr, err)
	}
	if port == "0" {
		return nil
	}
	if workers > 1 {
		return usagef("--listen-addr %s: each of this machine's %d workers would listen on port %s; give port 0 (%s) for a "+
			"free port each", addr, workers, port, anyPort)
	}
	if err := tryListen(addr); err != nil {
		return listenAddrError(addr, err)
	}
	return nil
}

// tryListen listens on addr and stops.
func tryListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
	}
	return err
}

// listenAddrError explains why --listen-addr addr cannot be listened on.
func listenAddrError(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return usagef(
			"--listen-addr %s: not an address of this machine (%v); give one of its own addresses, or leave the flag out", addr,
			err)
	case errors.Is(err, syscall.EADDRINUSE):
		return usagef("--listen-addr %s: the port is in use (%v); give a free port, or port 0 for any free port", addr, err)
	}
	return usagef("--listen-addr %s: cannot listen there: %v", addr, err)
}

// listenFailure turns the process group's failure to listen on the
// user's --listen-addr into a usage error: a port another process took
// between checkListenAddr and the group's own listen. Other errors, the
// store's listen on MASTER_PORT among them, are returned as they are.
func listenFailure(c config, err error) error {
	var op *net.OpError
	if c.listenAddr == "" || !errors.As(err, &op) || op.Op != "listen" || op.Addr == nil {
		return err
	}
	_, want, _ := net.SplitHostPort(c.listenAddr)
	if _, got, _ := net.SplitHostPort(op.Addr.String()); want == "0" || got != want {
		return err
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EADDRINUSE) {
		return listenAddrError(c.listenAddr, op)
	}
	return err
}
