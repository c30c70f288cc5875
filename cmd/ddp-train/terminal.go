package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Note [one writer owns the terminal]
//
// A progress bar is a line redrawn in place ("\r" and the new text); a
// log line written while it is on the screen would land inside it, and
// the next redraw would overwrite half of the log line. So on a terminal
// everything that reaches stderr (this process's logs, the workers' lines
// the launcher relays, the final error) goes through one console, which
// holds the bar: to print a log line it clears the bar's line, writes the
// line from column 0, and draws the bar again below it. Each of those is
// one Write to the terminal, under the console's lock.
//
// The bar shows rank 0's figures. In --backend local and under an external
// launcher (torchrun, mpirun, srun), rank 0 is in this process and shows
// them on its own console. Under ddp-train's own launcher the workers'
// stderr are pipes, so rank 0 sends its reports to the launcher through a
// pipe of their own (relay.go), and the launcher, whose stderr is the
// terminal, draws the one bar of the job. Where stderr is not a terminal
// there is no bar: rank 0 logs a "train" line every --log-every steps.
//
// A bar shows figures only once they have been measured, at the first
// --log-every step: before that it shows the elapsed time, not zeros.

// console is stderr when it is a terminal: Note [one writer owns the
// terminal]. Its methods are safe for concurrent use.
type console struct {
	mu      sync.Mutex
	w       io.Writer
	width   func() int      // the terminal's columns, asked at every redraw (it may be resized)
	began   time.Time       // the bar's elapsed time counts from here
	rep     *progressReport // what the bar shows; nil: no bar
	drawn   time.Time       // when show last drew it
	shown   bool            // the bar is on the screen, and the cursor at its end
	partial []byte          // the start of a line not yet ended
	stop    chan struct{}
	ticking sync.WaitGroup
}

// progressReport is rank 0's progress, what the bar shows. Total 0 means
// the job has not started its first step yet.
type progressReport struct {
	Step     int     `json:"step"`
	Total    int     `json:"total"`
	Measured bool    `json:"measured"` // Figures hold the figures of a whole --log-every window
	Figures  figures `json:"figures"`
	LogEvery int     `json:"log_every"` // when the first figures come
}

// progressSink receives rank 0's reports: a console, or the pipe to the
// launcher's console (relay.go).
type progressSink interface {
	show(progressReport)
	// end leaves the last bar on the screen, on a line of its own.
	end()
}

// attachConsole returns the writer to use for stderr: a console when w is
// a terminal (then also returned), else w itself and nil.
func attachConsole(w io.Writer) (io.Writer, *console) {
	tty, width := terminal(w)
	if !tty {
		return w, nil
	}
	c := &console{w: w, width: width, began: time.Now(), stop: make(chan struct{})}
	c.ticking.Add(1)
	go c.tick()
	return c, c
}

// tick redraws the bar every second, so that the elapsed time it shows
// moves while the job starts, and a step whose redraw show skipped is
// shown.
func (c *console) tick() {
	defer c.ticking.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.mu.Lock()
			c.draw()
			c.mu.Unlock()
		}
	}
}

// close ends the bar's line and stops the ticker. A nil console is fine.
func (c *console) close() {
	if c == nil {
		return
	}
	close(c.stop)
	c.ticking.Wait()
	c.end()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.w.Write(append(c.partial, '\n'))
		c.partial = nil
	}
}

// Write writes whole lines above the bar; the start of a line not yet
// ended waits for its end.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	i := bytes.LastIndexByte(c.partial, '\n')
	if i < 0 {
		return len(p), nil
	}
	var out []byte
	if c.shown {
		out = append(out, clearLine...)
	}
	out = append(out, c.partial[:i+1]...)
	c.partial = append([]byte(nil), c.partial[i+1:]...)
	c.shown = false
	if c.rep != nil {
		out = append(out, c.line()...)
		c.shown = true
	}
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// clearLine moves to column 0 and erases the line.
const clearLine = "\r\x1b[K"

// show draws r as the bar; the last step ends the bar's line.
func (c *console) show(r progressReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rep != nil && !worthShowing(*c.rep, r, c.drawn) {
		c.rep.Step = r.Step // drawn with the next log line or report
		return
	}
	c.rep, c.drawn = &r, time.Now()
	c.draw()
	if r.Total > 0 && r.Step >= r.Total && r.Measured {
		c.finish()
	}
}

// end leaves the bar where it is and ends its line: later lines go below.
func (c *console) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finish()
}

func (c *console) finish() {
	if c.shown {
		c.w.Write([]byte("\n"))
	}
	c.rep, c.shown = nil, false
}

// draw redraws the bar in place. Called with mu held.
func (c *console) draw() {
	if c.rep == nil {
		return
	}
	c.w.Write([]byte("\r" + c.line() + "\x1b[K"))
	c.shown = true
}

// line is the bar for the report shown now.
func (c *console) line() string {
	r, cols := *c.rep, c.width()
	if r.Measured {
		return barLine(r.Step, r.Total, r.Figures, cols)
	}
	return waitLine(r, time.Since(c.began), cols)
}

// waitLine is the bar before the first figures: how far, and for how
// long, the job has run, and when its figures come.
func waitLine(r progressReport, elapsed time.Duration, cols int) string {
	text := fmt.Sprintf(" starting... %s", elapsed.Round(time.Second))
	if r.Total > 0 {
		every := max(r.LogEvery, 1)
		next := min((r.Step/every+1)*every, r.Total) // a resumed run's first window ends here
		text = fmt.Sprintf(" %d/%d %s, figures at step %d", r.Step, r.Total, elapsed.Round(100*time.Millisecond), next)
	}
	width := min(max(cols-1-len(text)-2, 10), 50)
	done := width * min(r.Step, max(r.Total, 1)) / max(r.Total, 1)
	return cutTo("["+strings.Repeat("=", done)+strings.Repeat(" ", width-done)+"]"+text, cols)
}

// cutTo cuts line to cols-1 columns (it is ASCII), so the cursor stays on
// the line: a line that wrapped would scroll at every redraw.
func cutTo(line string, cols int) string {
	if len(line) > cols-1 {
		return line[:max(cols-1, 0)]
	}
	return line
}
