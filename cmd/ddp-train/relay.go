package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"time"
)

// progressFDEnv tells a worker of ddp-train's own launcher the file
// descriptor on which rank 0 sends its reports to the launcher's bar:
// Note [one writer owns the terminal]. The launcher sets it only when its
// stderr is a terminal.
const progressFDEnv = "GODDP_DDP_TRAIN_PROGRESS_FD"

// progressFD is the descriptor the launcher passes: its first extra file.
const progressFD = 3

// sinkFor is where this process's rank 0 shows its progress: the
// launcher's pipe, this process's terminal, or nowhere (nil: "train" log
// lines). JSON logs are for programs, so they get no bar.
func sinkFor(c config, con *console, lookup func(string) (string, bool)) progressSink {
	if c.logFormat != "console" {
		return nil
	}
	if v, ok := lookup(progressFDEnv); ok {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			return &pipeSink{w: os.NewFile(uintptr(fd), "progress")}
		}
	}
	if con == nil {
		return nil
	}
	return con
}

// pipeSink sends reports to the launcher, one JSON line each, as often as
// worthShowing says.
type pipeSink struct {
	w    io.WriteCloser // nil once the launcher stopped reading
	sent progressReport
	at   time.Time
}

func (p *pipeSink) show(r progressReport) {
	if p.w == nil {
		return
	}
	if !worthShowing(p.sent, r, p.at) {
		return
	}
	b, err := json.Marshal(r)
	if err == nil {
		_, err = p.w.Write(append(b, '\n'))
	}
	if err != nil { // the launcher is gone: the run goes on without a bar
		p.w.Close()
		p.w = nil
		return
	}
	p.sent, p.at = r, time.Now()
}

func (p *pipeSink) end() {}

// worthShowing says whether r, following prev shown at the time at, is
// worth a redraw: a terminal needs no more than ten a second (a step may
// take a millisecond), but new figures and the last step show at once.
func worthShowing(prev, r progressReport, at time.Time) bool {
	last := r.Total > 0 && r.Step >= r.Total
	return last || r.Figures != prev.Figures || r.Measured != prev.Measured || r.Total != prev.Total ||
		time.Since(at) >= 100*time.Millisecond
}

// relay is the launcher's end of the workers' progress pipe: it shows
// what rank 0 sends on the launcher's console.
type relay struct {
	con  *console
	r, w *os.File
	done chan struct{}
}

// startRelay opens the pipe when the launcher's stderr is a terminal
// (sink is its console); otherwise it returns nil, and the workers log.
func startRelay(sink progressSink) (*relay, error) {
	con, ok := sink.(*console)
	if !ok {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	rl := &relay{con: con, r: r, w: w, done: make(chan struct{})}
	con.show(progressReport{}) // "starting...", until rank 0 reports
	go rl.read()
	return rl, nil
}

func (rl *relay) read() {
	defer close(rl.done)
	sc := bufio.NewScanner(rl.r)
	for sc.Scan() {
		var r progressReport
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			rl.con.show(r)
		}
	}
}

// files are the workers' extra files: the pipe's write end is their
// progressFD.
func (rl *relay) files() []*os.File {
	if rl == nil {
		return nil
	}
	return []*os.File{rl.w}
}

// env tells the workers where the pipe is.
func (rl *relay) env() []string {
	if rl == nil {
		return nil
	}
	return []string{progressFDEnv + "=" + strconv.Itoa(progressFD)}
}

// close reads what the workers sent before they ended, then leaves the
// last bar on the screen. The workers have all exited: the read ends at
// once, or, if one left a process of its own holding the pipe, after a
// second.
func (rl *relay) close() {
	if rl == nil {
		return
	}
	rl.w.Close()
	select {
	case <-rl.done:
	case <-time.After(time.Second):
	}
	rl.r.Close()
	<-rl.done
	rl.con.end()
}
