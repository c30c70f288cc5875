package main

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/ft"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// Note [DiLoCo as a transaction]: with --fault-tolerant and
// --diloco-sync-every H, the transaction is an outer step (torchft's
// DiLoCo runs under its Manager the same way):
//
//  1. The round starts from the global parameters; the replica keeps its
//     state as it is then (ftState.Snapshot), to roll back to.
//  2. Start: the round's quorum. The participant of rank k among n takes
//     batches B+k·H … B+k·H+H−1, H inner steps with no communication (its
//     own optimizer, the schedule).
//  3. The pseudo-gradient, global minus local (the paper's sign), averaged
//     over the participants by the Manager; a healing replica contributes
//     zeros.
//  4. Commit. Committed: the outer Nesterov SGD steps the global
//     parameters with the average, every replica continues from them, and
//     B grows by n·H. Discarded: the replica rolls back to 1, and the round
//     is taken again on the same batches.
//
// A replica that heals receives the source's state at the start of the
// round: global parameters, the outer optimizer's momentum, the inner
// optimizer's state, the schedule and B; it then applies the round's
// average like the others. So the global parameters and the outer state
// are bitwise the same on every replica. The inner optimizers' states are
// each replica's own, as in DiLoCo; a healed replica starts from its
// source's. Fragments, delay, mixing and quantisation are not built here.

// ftOuter is a replica's DiLoCo state under --fault-tolerant.
type ftOuter struct {
	global []pg.Tensor
	outer  optim.Optimizer
	delta  pg.Tensor // the pseudo-gradients, one buffer
}

// newFTOuter starts DiLoCo from the parameters as they are.
func newFTOuter(c config, params []pg.Tensor) (*ftOuter, error) {
	o := optim.Options{LR: optim.Set(c.outerLR), Momentum: optim.Set(c.outerMomentum), Nesterov: c.outerMomentum > 0}
	outer, err := optim.NewWith("sgd", o, len(params))
	if err != nil {
		return nil, fmt.Errorf("DiLoCo's outer optimizer: %w", err)
	}
	d := &ftOuter{outer: outer}
	n := 0
	for _, p := range params {
		g := pg.NewTensor(p.Dtype, p.Len())
		copy(g.Data, p.Data)
		d.global = append(d.global, g)
		n += p.Len()
	}
	d.delta = pg.NewTensor(params[0].Dtype, n)
	return d, nil
}

// save puts the global parameters and the outer state into snap.
func (d *ftOuter) save(snap *ftSnapshot) {
	for _, g := range d.global {
		snap.Global = append(snap.Global, diloco.Widen(g))
	}
	st := d.outer.State()
	snap.Outer = &st
}

// load takes them from snap.
func (d *ftOuter) load(snap ftSnapshot) error {
	if len(snap.Global) != len(d.global) || snap.Outer == nil {
		return fmt.Errorf("the peer's state holds %d global parameters, this replica %d: are both --diloco-sync-every?",
			len(snap.Global), len(d.global))
	}
	for i, g := range d.global {
		if len(snap.Global[i]) != g.Len() {
			return fmt.Errorf("the peer's global parameter %d has %d values, this replica's %d", i, len(snap.Global[i]),
				g.Len())
		}
		diloco.Narrow(g, snap.Global[i])
	}
	return d.outer.Load(*snap.Outer)
}

// pseudoGradient fills delta with global − local.
func (d *ftOuter) pseudoGradient(params []pg.Tensor) {
	off := 0
	for i, p := range params {
		g, out := diloco.Widen(d.global[i]), diloco.Widen(p)
		for j := range out {
			out[j] = g[j] - out[j]
		}
		diloco.Narrow(d.delta.Slice(off, off+p.Len()), out)
		off += p.Len()
	}
}

// step is the committed round's outer step: the global parameters stepped
// with the averaged delta, and the parameters set to them.
func (d *ftOuter) step(params []pg.Tensor) error {
	grads := make([]pg.Tensor, len(params))
	off := 0
	for i, p := range params {
		grads[i] = d.delta.Slice(off, off+p.Len())
		off += p.Len()
	}
	if err := d.outer.Step(d.global, grads); err != nil {
		return fmt.Errorf("the outer step: %w", err)
	}
	for i, p := range params {
		copy(p.Data, d.global[i].Data)
	}
	return nil
}

// ftRound is one DiLoCo round as a transaction (Note [DiLoCo as a
// transaction]).
func (t *trainer) ftRound(ctx context.Context, s *session, feed *feeder, mgr *ft.Manager) (stats, ft.Outcome, error) {
	fs, H := s.ft, t.c.syncEvery
	before := mgr.Step()
	pre, err := fs.Snapshot()
	if err != nil {
		return stats{}, ft.Outcome{}, err
	}
	info, err := t.startFT(ctx, mgr)
	if err != nil {
		return stats{}, ft.Outcome{}, err
	}
	var sum stats
	for i := range H {
		st, err := t.innerStep(ctx, s, feed, fs.batch+max(info.Rank, 0)*H+i, info.Healing)
		if err != nil {
			mgr.Fail(err) // a failed inner step fails the round everywhere; the error is this replica's too
			_, _ = mgr.Commit(ctx)
			return sum, ft.Outcome{}, err
		}
		sum = addStats(sum, st)
	}
	params, err := s.ddp.ParamTensors()
	if err != nil {
		return sum, ft.Outcome{}, err
	}
	fs.dl.pseudoGradient(params)
	_ = mgr.AllReduce(ctx, fs.dl.delta) // a failure is the round's: Commit discards it
	out, err := mgr.Commit(ctx)
	if err != nil {
		return sum, out, err
	}
	if !out.Committed {
		if mgr.Step() == before { // not healed meanwhile: back to the round's start
			return sum, out, fs.Restore(before, pre)
		}
		return sum, out, nil
	}
	if params, err = s.ddp.ParamTensors(); err != nil { // after a recovery: the restored values
		return sum, out, err
	}
	if err := fs.dl.step(params); err != nil {
		return sum, out, err
	}
	fs.batch += len(info.Participants) * H
	return sum, out, nil
}

// innerStep is one of DiLoCo's inner steps on batch b: the replica's own
// gradients and optimizer, no communication. A healing replica's steps
// count for nothing (it restores its source's state at Commit).
func (t *trainer) innerStep(ctx context.Context, s *session, feed *feeder, b int, healing bool) (stats, error) {
	labels, err := feed.load(s, b)
	if err != nil {
		return stats{}, err
	}
	defer s.vm.Reset()
	if err := s.ddp.RunAll(ctx, s.vm); err != nil {
		if what, nonFinite := nonFiniteGrads(err); nonFinite {
			return stats{}, fmt.Errorf("an inner step's gradients are not finite: %s", what)
		}
		return stats{}, err
	}
	params, grads, err := s.ddp.StepTensors()
	if err != nil {
		return stats{}, err
	}
	loss := s.net.LossValue()
	st := stats{loss: loss, correct: s.net.Correct(labels), samples: len(labels), steps: 1, lossOK: finiteLoss(loss),
		lr: s.sched.LR()}
	if healing {
		st = stats{steps: 1, lossOK: true, lr: st.lr}
	}
	return st, s.update(ctx, t.c, params, grads)
}

// addStats sums two steps' stats: the loss as a mean over steps.
func addStats(a, b stats) stats {
	n := float64(a.steps + b.steps)
	loss := 0.0
	if n > 0 {
		loss = (a.loss*float64(a.steps) + b.loss*float64(b.steps)) / n
	}
	return stats{loss: loss, correct: a.correct + b.correct, samples: a.samples + b.samples,
		compute: a.compute + b.compute, comm: a.comm + b.comm, steps: a.steps + b.steps,
		lossOK: (a.lossOK || a.steps == 0) && b.lossOK, lr: b.lr}
}
