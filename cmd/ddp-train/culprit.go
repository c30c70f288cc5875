package main

// Note [the headline names the culprit]: when a rank stops, dies or falls
// behind, every other rank fails a moment later, and pg/desync's
// diagnosis (a *pg.StallError) lets them agree on which rank it was. The
// launcher's one line must say so first, whichever worker exited first.
// A worker of ddp-train's own launcher therefore ends its standard error
// with one machine-readable line, verdictPrefix and a JSON verdict, and
// the launcher reads those lines from the workers' tails rather than
// parsing their prose. It adds what only it knows: whether the culprit's
// process was found stopped (SIGSTOP) and killed, or died on its own.
//
//	ddp-train: rank 2 stopped responding (SIGSTOP) at allreduce #57; ranks 0, 1 timed out waiting for it

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
	"golang.org/x/sys/unix"
)

// verdictPrefix starts a worker's machine-readable verdict line.
const verdictPrefix = "goddp-verdict: "

// verdict is what one rank's diagnosis found: Note [the headline names
// the culprit].
type verdict struct {
	Reporter   int    `json:"reporter"`
	Op         string `json:"op"`
	Seq        uint64 `json:"seq"`
	Culprits   []int  `json:"culprits"` // silent, then behind, then mismatched
	Silent     []int  `json:"silent,omitempty"`
	Behind     []int  `json:"behind,omitempty"`
	Mismatched []int  `json:"mismatched,omitempty"`
	Store      bool   `json:"store,omitempty"` // the store did not answer; its host is the culprit
	Timeout    bool   `json:"timeout,omitempty"`
	// What network probes found of the silent ranks (pg's Note [network
	// or process]): Unreachable, their host did not answer (the network
	// is at fault); Unresponsive, their host answered but they did not
	// (stopped or busy); Gone, their host refused (the process is gone).
	Unreachable  []int `json:"unreachable,omitempty"`
	Unresponsive []int `json:"unresponsive,omitempty"`
	Gone         []int `json:"gone,omitempty"`
}

// probed returns the silent ranks of se whose probe found reach.
func probed(se *pg.StallError, reach pg.Reach) []int {
	var out []int
	for _, p := range se.Progress {
		if p.Reach == reach && slices.Contains(se.Silent, p.Rank) {
			out = append(out, p.Rank)
		}
	}
	return out
}

// writeVerdict ends a worker's standard error with its diagnosis, when
// err carries one that names a culprit.
func writeVerdict(w io.Writer, err error) {
	var se *pg.StallError
	if !errors.As(err, &se) || se.Group != "" || len(se.Culprits()) == 0 {
		return
	}
	v := verdict{Reporter: se.Rank, Op: se.Op.String(), Seq: se.Seq, Culprits: se.Culprits(),
		Silent: se.Silent, Behind: se.Behind, Mismatched: se.Mismatched,
		Store:       se.StoreErr != nil && len(se.Silent)+len(se.Behind)+len(se.Mismatched) == 0,
		Timeout:     errors.Is(se.Kind, pg.ErrTimeout),
		Unreachable: se.Unreachable, Unresponsive: probed(se, pg.ReachAnswers), Gone: probed(se, pg.ReachRefused)}
	b, jerr := json.Marshal(v)
	if jerr == nil {
		fmt.Fprintf(w, "%s%s\n", verdictPrefix, b)
	}
}

// readVerdict returns the last verdict line in a worker's tail.
func readVerdict(tail string) (verdict, bool) {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if js, ok := strings.CutPrefix(lines[i], verdictPrefix); ok {
			var v verdict
			return v, json.Unmarshal([]byte(js), &v) == nil && len(v.Culprits) > 0
		}
	}
	return verdict{}, false
}

// agreed returns the culprit most of the workers' verdicts name
// first (the lowest rank on a tie), the verdicts that name it, and false
// when no worker left a verdict.
func agreed(fs []launch.Failure) (int, []verdict, bool) {
	votes := map[int][]verdict{}
	for _, f := range fs {
		if v, ok := readVerdict(f.Tail); ok {
			votes[v.Culprits[0]] = append(votes[v.Culprits[0]], v)
		}
	}
	best, found := 0, false
	for r, vs := range votes {
		if !found || len(vs) > len(votes[best]) || (len(vs) == len(votes[best]) && r < best) {
			best, found = r, true
		}
	}
	return best, votes[best], found
}

// culpritHeadline is the launcher's line for a job whose workers agreed
// on a culprit, or "" when none did and the culprit did not die on its
// own: Note [the headline names the culprit].
func culpritHeadline(we *launch.WorkerError) string {
	r, vs, ok := agreed(append(slices.Clone(we.Failures), we.Stopped...)) // a stopped survivor's verdict counts
	// the culprit's own failure, if it ended by itself
	var own *launch.Failure
	for i, f := range we.Failures {
		if f.Rank == r || (!ok && exitCode(f.Err) != exitPeerFailed) {
			own = &we.Failures[i]
			break
		}
	}
	if !ok {
		if own == nil || !killed(own.Err) {
			return ""
		}
		return fmt.Sprintf("rank %d died (%s); the others lost it", own.Rank, exitStatus(own.Err))
	}
	what, waiting := fate(r, vs[0], own, slices.Contains(we.Frozen, r))
	reporters := make([]int, 0, len(vs))
	for _, v := range vs {
		reporters = append(reporters, v.Reporter)
	}
	slices.Sort(reporters)
	host := ""
	if vs[0].Store {
		host = " (the store's host)"
	}
	return fmt.Sprintf("rank %d%s %s at %s #%d; %s %s", r, host, what, vs[0].Op, vs[0].Seq, ranksList(reporters), waiting)
}

// fate says what happened to culprit r, from a verdict naming it, its
// own failure (nil if the launcher stopped it) and whether the launcher
// found it stopped.
func fate(r int, v verdict, own *launch.Failure, frozen bool) (what, waiting string) {
	switch {
	case slices.Contains(v.Mismatched, r):
		return "issued a different collective", "disagree with it"
	case slices.Contains(v.Behind, r):
		return "fell behind (it never entered the collective)", "timed out waiting for it"
	case own != nil && killed(own.Err):
		return "died (" + exitStatus(own.Err) + ")", "lost it"
	case own != nil:
		return "failed (" + exitStatus(own.Err) + ")", "lost it"
	case frozen:
		return "stopped responding (SIGSTOP: found stopped, and killed)", "timed out waiting for it"
	case slices.Contains(v.Unreachable, r):
		return "became unreachable (its host does not answer: the network to it is down or partitioned)", "lost it"
	case slices.Contains(v.Gone, r):
		return "is gone (its host refused the connection)", "lost it"
	case slices.Contains(v.Unresponsive, r):
		return "stopped responding (its host answers, but the process does not: stopped or busy)", "timed out waiting for it"
	}
	return "stopped responding (hung, or stopped)", "timed out waiting for it"
}

// exitStatus says how a worker ended: "killed by SIGKILL", "exit status 1".
func exitStatus(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + unix.SignalName(ws.Signal())
		}
	}
	return err.Error()
}

// killed reports whether a worker's exit was a signal's doing.
func killed(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// ranksList names rs: "rank 0", "ranks 0, 1".
func ranksList(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

// culpritError is the launcher's error for a job whose culprit is known:
// the headline, then the root failure's own line for the details.
func culpritError(headline string, we *launch.WorkerError, line string, c config) error {
	if c.maxRestarts > 0 {
		plural := "s"
		if we.Attempt == 1 {
			plural = ""
		}
		headline += fmt.Sprintf("; after %d restart%s (--max-restarts %d)", we.Attempt, plural, c.maxRestarts)
	}
	if line == "" {
		return errors.New(headline)
	}
	return fmt.Errorf("%s; %s", headline, line)
}
