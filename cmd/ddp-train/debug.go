package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	rpprof "runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/reducer"
)

// Note [debug endpoint and report]
//
// A stuck or failed job must leave something to read. Every rank serves
// /debug/pprof/ (goroutine stacks, profiles: net/http/pprof),
// /debug/state (a JSON object: the step, how long it has run, and the
// reducer's Progress: its phase, the parameters marked ready and the
// buckets launched in the iteration in progress) and /debug/flight (the
// flight recorder, in torch's layout: Note [flight recorder]): with
// --metrics-addr beside /metrics and the probes, to loopback clients
// only, or with --debug-addr on an address of its own (Note [debug
// endpoints are private]). And whether or not
// metrics are served, ddp-train's own launcher gives every worker a
// report directory (reportDirEnv); a worker that fails writes its
// goroutine stacks and its state there (rank-N/), and the launcher
// prints the directory's path under its error line. A run that ends well,
// or that was stopped by a signal (SIGINT, SIGTERM: the user's choice,
// not a failure), leaves no directory behind.

// reportDirEnv names the directory where a failing worker writes its
// report; ddp-train's launcher sets it.
const reportDirEnv = "GODDP_REPORT_DIR"

// debugState is what /debug/state and a failure report say of a rank.
type debugState struct {
	rank      int
	started   time.Time
	step      atomic.Int64
	total     atomic.Int64
	stepStart atomic.Int64 // unix ns when the step in progress began
	reducer   atomic.Pointer[reducer.Reducer]
	flight    atomic.Pointer[flight.Recorder] // /debug/flight
}

func newDebugState(rank int) *debugState { return &debugState{rank: rank, started: time.Now()} }

// attach records the run's reducer and length.
func (d *debugState) attach(r *reducer.Reducer, total int) {
	if d == nil {
		return
	}
	d.reducer.Store(r)
	d.total.Store(int64(total))
}

// at records that step (counted from 1) has begun.
func (d *debugState) at(step int) {
	if d == nil {
		return
	}
	d.step.Store(int64(step))
	d.stepStart.Store(time.Now().UnixNano())
}

// stateReport is /debug/state's JSON.
type stateReport struct {
	Rank        int               `json:"rank"`
	Step        int64             `json:"step"`
	Steps       int64             `json:"steps"`
	StepSeconds float64           `json:"step_seconds"` // how long the step in progress has run
	UpSeconds   float64           `json:"up_seconds"`
	Reducer     *reducer.Progress `json:"reducer,omitempty"`
	Goroutines  int               `json:"goroutines"`
}

func (d *debugState) report() stateReport {
	now := time.Now()
	s := stateReport{Rank: d.rank, Step: d.step.Load(), Steps: d.total.Load(), UpSeconds: now.Sub(d.started).Seconds(),
		Goroutines: rpprof.Lookup("goroutine").Count()}
	if t := d.stepStart.Load(); t != 0 {
		s.StepSeconds = now.Sub(time.Unix(0, t)).Seconds()
	}
	if r := d.reducer.Load(); r != nil {
		p := r.Progress()
		s.Reducer = &p
	}
	return s
}

// debugMux serves /debug/pprof/, /debug/state and /debug/flight of d
// (Note [debug endpoints are private]: where, and the profiles' limits).
func debugMux(d *debugState) *http.ServeMux {
	mux := http.NewServeMux()
	var gate profileGate
	mux.HandleFunc("/debug/pprof/", gate.wrap(pprof.Index, false)) // a named profile, a delta one with seconds
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", gate.wrap(pprof.Profile, true))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", gate.wrap(pprof.Trace, true))
	mux.HandleFunc("/debug/flight", func(w http.ResponseWriter, _ *http.Request) {
		rec := d.flight.Load()
		if rec == nil {
			http.Error(w, "no flight recorder yet: the process group has not formed", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := rec.Dump(w); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("/debug/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.report())
	})
	return mux
}

// writeReport writes this rank's failure report into dir/rank-N: every
// goroutine's stack, the state and the error. It is best effort: the
// error being reported matters more than a report that cannot be written.
func writeReport(dir string, d *debugState, failure error) {
	if dir == "" || d == nil {
		return
	}
	rankDir := filepath.Join(dir, "rank-"+strconv.Itoa(d.rank))
	if err := os.MkdirAll(rankDir, 0o755); err != nil {
		return
	}
	if f, err := os.Create(filepath.Join(rankDir, "stacks.txt")); err == nil {
		_ = rpprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
	b, _ := json.MarshalIndent(struct {
		stateReport
		Error string `json:"error"`
	}{d.report(), fmt.Sprint(failure)}, "", "  ")
	_ = os.WriteFile(filepath.Join(rankDir, "state.json"), append(b, '\n'), 0o644)
}

// Note [a stopped rank's report]: a rank stopped by SIGSTOP (a debugger,
// a job control mistake, a frozen container) is the culprit, and the one
// whose stacks matter most, but it cannot write anything while stopped.
// ddp-train's launcher, on finding a worker stopped, sends it SIGQUIT and
// then SIGCONT (launch.Spec.StoppedStacks): the signal is pending when
// the process resumes, and the Go runtime's handler freezes the world and
// prints every goroutine's stack, still where they stood, before it
// exits; the launcher writes that output to rank-N/stacks.txt instead of
// the console. Its flight recorder is not dumped: reading it means
// letting the rank run, and it would record collectives issued after the
// stop (to peers that are gone), hiding the one it never reached; the
// survivors' recorders say what it did not do. A program that is not Go
// just dies of SIGQUIT, and the launcher kills whatever is left after
// launch.StoppedGrace.

// stoppedStacks opens the file that takes a stopped rank's stacks: Note
// [a stopped rank's report].
func (r reportDir) stoppedStacks(rank int) (io.WriteCloser, error) {
	dir := filepath.Join(r.path, "rank-"+strconv.Itoa(rank))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "stacks.txt"))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "rank %d was found stopped (SIGSTOP); the launcher sent it SIGQUIT and SIGCONT, and the Go runtime's "+
		"dump follows:\n\n", rank)
	return f, nil
}

// crashed opens the file that takes a crashed rank's Go runtime report:
// Note [a crash is not bad input].
func (r reportDir) crashed(rank int) (io.WriteCloser, error) {
	if err := os.MkdirAll(filepath.Dir(r.crashFile(rank)), 0o755); err != nil {
		return nil, err
	}
	return os.Create(r.crashFile(rank))
}

// crashFile is where crashed writes rank's report.
func (r reportDir) crashFile(rank int) string {
	return filepath.Join(r.path, "rank-"+strconv.Itoa(rank), "crash.txt")
}

// reportDir is the launcher's side of the failure report: a directory
// made before the workers start, kept and named when the job fails,
// removed when it ends well.
type reportDir struct{ path string }

func newReportDir() (reportDir, error) {
	dir, err := os.MkdirTemp("", "ddp-train-report-")
	if err != nil {
		return reportDir{}, fmt.Errorf("the failure report's directory: %w", err)
	}
	return reportDir{dir}, nil
}

// env is what the workers get to find the directory.
func (r reportDir) env() []string { return []string{reportDirEnv + "=" + r.path} }

// finish passes err on; with a failure it prints where the reports are,
// if any worker wrote one, else (success, a signal, no reports) it
// removes the directory.
func (r reportDir) finish(err error, stderr io.Writer) error {
	entries, _ := os.ReadDir(r.path)
	var stopped *launch.Interrupted
	if err == nil || len(entries) == 0 || errors.As(err, &stopped) {
		os.RemoveAll(r.path)
		return err
	}
	fmt.Fprintf(stderr, "ddp-train: report: %s (each failed rank's goroutine stacks and state)\n", r.path)
	return err
}
