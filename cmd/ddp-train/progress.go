package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// progress reports training on rank 0: a bar on a terminal, otherwise a
// log line every --log-every steps. Every rank calls add, because the
// numbers shown are averaged over ranks with a small allreduce at each
// figures, issued by every rank at the same steps.
type progress struct {
	t        *trainer
	total    int
	tty      bool
	win      stats // since the last figures
	winStart time.Time
	began    time.Time
	last     figures
}

// figures is one set of figures averaged over ranks.
type figures struct {
	Loss, Accuracy, SamplesPerSec, CommFraction float64
}

func newProgress(t *trainer, total int) *progress {
	tty := false
	if f, ok := t.stderr.(*os.File); ok && t.out != io.Discard {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = t.c.logFormat == "console"
		}
	}
	now := time.Now()
	return &progress{t: t, total: total, tty: tty, winStart: now, began: now}
}

func (p *progress) add(ctx context.Context, step int, st stats) error {
	p.win.loss += st.loss
	p.win.correct += st.correct
	p.win.samples += st.samples
	p.win.compute += st.compute
	p.win.comm += st.comm
	p.win.steps++
	if step%p.t.c.logEvery != 0 && step != p.total {
		if p.tty {
			p.bar(step, p.last)
		}
		return nil
	}
	r, err := p.reduce(ctx)
	if err != nil {
		return err
	}
	p.last = r
	switch {
	case p.t.out == io.Discard: // only rank 0 reports
	case p.tty:
		p.bar(step, r)
	default:
		p.t.log.Info("train", zap.Int("step", step), zap.Int("steps", p.total), zap.Float64("loss", r.Loss),
			zap.Float64("accuracy", r.Accuracy), zap.Float64("samples_per_sec", r.SamplesPerSec),
			zap.Float64("comm_fraction", r.CommFraction))
	}
	p.t.metrics.observe(step, r)
	p.win, p.winStart = stats{}, time.Now()
	return nil
}

// reduce averages the window's figures over ranks.
func (p *progress) reduce(ctx context.Context) (figures, error) {
	w := p.win
	el := time.Since(p.winStart).Seconds()
	v := []float64{w.loss, float64(w.correct), float64(w.samples), w.comm.Seconds(), (w.compute + w.comm).Seconds(), float64(w.steps)}
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

func (p *progress) bar(step int, r figures) {
	const width = 30
	done := width * step / max(p.total, 1)
	fmt.Fprintf(p.t.stderr, "\r[%s%s] %d/%d loss %.4f acc %.1f%% %.0f samples/s comm %.0f%% ",
		strings.Repeat("=", done), strings.Repeat(" ", width-done), step, p.total, r.Loss, 100*r.Accuracy, r.SamplesPerSec, 100*r.CommFraction)
	if step == p.total {
		fmt.Fprintln(p.t.stderr)
	}
}

// finish returns the last figures, taking one if no step ran.
func (p *progress) finish(ctx context.Context) (figures, error) {
	if p.win.steps > 0 {
		return p.reduce(ctx)
	}
	return p.last, nil
}
