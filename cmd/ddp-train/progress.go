package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
	"golang.org/x/term"
)

// progress reports training on rank 0: a bar on a terminal (Note [one
// writer owns the terminal]), otherwise a log line every --log-every
// steps. Every rank calls add, because the numbers shown are averaged over
// ranks with a small allreduce at each figures, issued by every rank at
// the same steps.
type progress struct {
	t        *trainer
	total    int
	sink     progressSink // rank 0's bar; nil: log lines
	win      stats        // since the last figures
	skipped  int          // steps skipped by --on-nonfinite skip, in the whole run
	winStart time.Time
	last     figures
	measured bool // last holds figures: a bar shows none before
}

// figures is one set of figures averaged over ranks: the training
// batches' loss and accuracy, and the last held-out evaluation's (Note
// [held-out evaluation], eval.go).
type figures struct {
	Loss          float64 `json:"loss"`
	Accuracy      float64 `json:"accuracy"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	CommFraction  float64 `json:"comm_fraction"`
	Evaluated     bool    `json:"evaluated,omitempty"` // EvalLoss and EvalAccuracy hold an evaluation's
	EvalLoss      float64 `json:"eval_loss,omitempty"`
	EvalAccuracy  float64 `json:"eval_accuracy,omitempty"`
}

// newProgress starts counting at step start (a resumed run's).
func newProgress(t *trainer, start, total int) *progress {
	p := &progress{t: t, total: total, winStart: time.Now()}
	if t.out != io.Discard {
		p.sink = t.c.bar
	}
	if p.sink != nil && p.total > 0 {
		p.bar(start) // the figures are timed from here
	}
	return p
}

// defaultColumns is the width assumed when the terminal does not say.
const defaultColumns = 80

// terminal reports whether w is a terminal (a character device such as
// /dev/null is not), and a function that returns its width in columns.
func terminal(w io.Writer) (bool, func() int) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, func() int { return defaultColumns }
	}
	fd := int(f.Fd())
	return true, func() int {
		if cols, _, err := term.GetSize(fd); err == nil && cols > 0 {
			return cols
		}
		return defaultColumns
	}
}

func (p *progress) add(ctx context.Context, step int, st stats) error {
	p.skipped += st.skipped
	p.win.skipped += st.skipped
	p.win.loss += st.loss
	p.win.correct += st.correct
	p.win.samples += st.samples
	p.win.compute += st.compute
	p.win.comm += st.comm
	p.win.steps++
	p.win.lr = st.lr
	p.t.metrics.addSamples(st.samples, st.skipped)
	if step%p.t.c.logEvery != 0 && step != p.total {
		p.bar(step)
		return nil
	}
	r, err := p.reduce(ctx)
	if err != nil {
		return err
	}
	r.Evaluated, r.EvalLoss, r.EvalAccuracy = p.last.Evaluated, p.last.EvalLoss, p.last.EvalAccuracy
	p.last, p.measured = r, true
	switch {
	case p.t.out == io.Discard: // only rank 0 reports
	case p.sink != nil:
		p.bar(step)
	default:
		p.t.log.Info("train", zap.Int("step", step), zap.Int("steps", p.total), zap.Float64("loss", r.Loss),
			zap.Float64("accuracy", r.Accuracy), zap.Float64("lr", p.win.lr), zap.Float64("samples_per_sec", r.SamplesPerSec),
			zap.Float64("comm_fraction", r.CommFraction))
	}
	p.t.metrics.observe(step, r)
	p.t.metrics.observeLR(p.win.lr)
	p.win, p.winStart = stats{}, time.Now()
	return nil
}

// reduce averages the window's figures over ranks.
func (p *progress) reduce(ctx context.Context) (figures, error) {
	w := p.win
	el := time.Since(p.winStart).Seconds()
	v := []float64{w.loss, float64(w.correct), float64(w.samples), w.comm.Seconds(), (w.compute + w.comm).Seconds(),
		float64(w.steps - w.skipped)}
	if err := p.t.g.AllReduce(ctx, pg.Float64s(v), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return figures{}, fmt.Errorf("averaging the progress figures: %w", err)
	}
	r := figures{Loss: v[0] / max(v[5], 1), Accuracy: v[1] / max(v[2], 1)}
	if el > 0 {
		r.SamplesPerSec = v[2] / el
	}
	if v[4] > 0 {
		r.CommFraction = v[3] / v[4]
	}
	return r, nil
}

// bar shows step on the bar, with the last figures once there are some.
func (p *progress) bar(step int) {
	if p.sink != nil {
		p.sink.show(progressReport{Step: step, Total: p.total, Measured: p.measured, Figures: p.last,
			LogEvery: p.t.c.logEvery})
	}
}

// setEval shows an evaluation after step on the bar, from then on. The
// bar of the last step has ended its line before the last evaluation, so
// that one is in the "eval" line only.
func (p *progress) setEval(r evalResult) {
	p.last.Evaluated, p.last.EvalLoss, p.last.EvalAccuracy = true, r.Loss, r.Accuracy
	if p.measured && r.Step < p.total {
		p.bar(r.Step)
	}
}

// end leaves the bar of a run stopped before its last step on the screen.
func (p *progress) end() {
	if p.sink != nil {
		p.sink.end()
	}
}

// barLine is the progress line for a terminal cols wide: a bar that takes
// what the figures leave, up to 50 columns and at least 10, and the
// figures; on a terminal too narrow for both, the line is cut, as a line
// that wrapped would scroll at every redraw. It is never wider than
// cols-1, so the cursor stays on the line.
func barLine(step, total int, r figures, cols int) string {
	text := fmt.Sprintf(" %d/%d loss %.4f acc %.1f%% %.0f samples/s comm %.0f%% ",
		step, total, r.Loss, 100*r.Accuracy, r.SamplesPerSec, 100*r.CommFraction)
	if r.Evaluated { // the held-out set's, after the training batches'
		text += fmt.Sprintf("eval loss %.4f acc %.1f%% ", r.EvalLoss, 100*r.EvalAccuracy)
	}
	width := min(max(cols-1-len(text)-2, 10), 50)
	done := width * min(step, total) / max(total, 1)
	return cutTo("["+strings.Repeat("=", done)+strings.Repeat(" ", width-done)+"]"+text, cols)
}

// finish returns the last figures, taking one if no step ran.
func (p *progress) finish(ctx context.Context) (figures, error) {
	if p.win.steps > 0 {
		return p.reduce(ctx)
	}
	return p.last, nil
}
