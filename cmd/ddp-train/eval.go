package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/sampler"
	"go.uber.org/zap"
	"gorgonia.org/gorgonia"
)

// Note [held-out evaluation]
//
// --eval-data F --eval-labels F score the model on a held-out set during
// the run, and `ddp-train eval` scores a saved one (evalcmd.go). The
// figures are the held-out set's, every sample counted exactly once,
// whatever the world size:
//
//   - Rank r of W scores the contiguous shard [r·N/W, (r+1)·N/W) of the N
//     samples, in batches of --batch-size, with no padding (the sampler's
//     padding would count samples twice); the shards cover the set once.
//     Each sample's loss is the training loss, softmax cross-entropy,
//     computed in float64 from its logits as log Σ exp(z − max) − (z_y −
//     max); a row's logits do not depend on the other rows of its batch.
//     One float64 allreduce of (sum of losses, correct, samples) gives
//     every rank the set's mean loss and accuracy, equal to one process's
//     up to the order of the sum (TestEvalSameOnEveryWorldSize).
//   - The forward pass runs on a graph of its own (no gradients, no DDP
//     hooks, no optimizer), into which the training parameters are copied
//     before each evaluation: training's parameters, its data order and
//     its random state are untouched, so a run ends with bitwise the same
//     parameters with and without --eval-data (TestEvalLeavesTrainingAlone).
//   - When: without --eval-every, after every optimizer step that ends an
//     epoch and after the last step; --eval-every N, after every N-th step
//     and the last; --eval-every 0, after the last step only. A run with
//     nothing to train (--steps 0 --epochs 0, or a resume at the last step)
//     evaluates once. A run a signal stops does not evaluate on its way out.
//   - The "train" lines' loss and accuracy are the training batches'
//     (averaged over ranks since the previous line); the "eval" lines',
//     the summary's eval_loss and eval_accuracy and the ddp_eval_* gauges
//     are the held-out set's, from the last evaluation.

// evalFlags are the flags of held-out evaluation.
type evalFlags struct {
	evalData, evalLabels string
	evalEvery            int  // --eval-every; evalEveryGiven says whether it was given
	evalOnly             bool // `ddp-train eval`: score --init on --data (evalcmd.go)
}

func (e *evalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.evalData, "eval-data", "", "held-out features, as --data (same formats and input scaling): loss "+
		"and accuracy over every sample once, data-parallel, in \"eval\" lines, the summary (eval_loss, eval_accuracy) "+
		"and metrics; the \"train\" lines' loss and accuracy are the training batches'")
	fs.StringVar(&e.evalLabels, "eval-labels", "", "held-out labels, as --labels (needs --eval-data)")
	fs.IntVar(&e.evalEvery, "eval-every", 0, "evaluate --eval-data every N optimizer steps and after the last (0: only "+
		"after the last; default: after each epoch's last step and the run's)")
}

// validateEval checks the evaluation flags: Note [no flag is ignored].
func (c config) validateEval() error {
	switch {
	case (c.evalData == "") != (c.evalLabels == ""):
		return usagef("--eval-data and --eval-labels go together")
	case c.given("eval-every") && c.evalData == "":
		return usagef("--eval-every needs --eval-data: there is no held-out set to evaluate")
	case c.evalEvery < 0:
		return usagef("--eval-every %d: want 0 (only after the last step) or a positive number of steps", c.evalEvery)
	}
	return nil
}

// evaluating reports whether the run scores a held-out set.
func (c config) evaluating() bool { return c.evalData != "" || c.evalOnly }

// checkEvalData checks the held-out set against the training data's info
// before any worker starts (exit 2): the same features and shape, labels
// within the model's classes.
func checkEvalData(c config, info dataset.Info) error {
	if c.evalData == "" {
		return nil
	}
	ev, err := dataset.Inspect(c.evalData, c.evalLabels, info.Classes)
	if err != nil {
		return err
	}
	return fitsModel(c, ev, info)
}

// fitsModel refuses a held-out set whose samples the model cannot take.
func fitsModel(c config, ev, info dataset.Info) error {
	if ev.D != info.D || !slices.Equal(ev.Shape, info.Shape) {
		return usagef("--eval-data %s: samples of shape %v (%d features); the model takes %v (%d features), as --data",
			c.evalData, ev.Shape, ev.D, info.Shape, info.D)
	}
	return nil
}

// evalResult is one evaluation, the same on every rank.
type evalResult struct {
	Step     int     // the optimizer steps done when it ran
	Loss     float64 // mean cross-entropy over the set
	Accuracy float64
	Samples  int
}

// evaluator scores a held-out set on one rank: Note [held-out evaluation].
type evaluator struct {
	ds     *dataset.Dataset
	lo, hi int // this rank's shard
	spec   model.Spec
	params *model.Params
	net    *model.Net
	vm     gorgonia.VM
	gomlx  *gomlxForward // --engine gomlx: the logits from GoMLX's program (gomlxeval.go); nil: from net
	x      []float64
	y      []int
	perEp  int // optimizer micro-batches per training epoch, for the default schedule
	last   *evalResult
}

// newEvaluator builds the evaluation graph of s's model, or returns nil
// when the run does not evaluate. The held-out set is the training set
// under `ddp-train eval`, else --eval-data, loaded by each rank.
func (t *trainer) newEvaluator(s *session) (*evaluator, error) {
	if !t.c.evaluating() {
		return nil, nil
	}
	ds := t.ds
	if !t.c.evalOnly {
		var err error
		if ds, err = dataset.Load(t.c.evalData, t.c.evalLabels, t.ds.Classes); err != nil {
			return nil, err
		}
		if err := fitsModel(t.c, ds.Info(), t.ds.Info()); err != nil {
			return nil, err
		}
	}
	n, w, r := ds.N, t.g.Size(), t.g.Rank()
	e := &evaluator{ds: ds, lo: r * n / w, hi: (r + 1) * n / w, spec: s.spec, x: make([]float64, s.spec.Batch*ds.D),
		y: make([]int, s.spec.Batch), perEp: sampler.StepsPerEpoch(s.smp.NumSamples(), t.c.batchSize)}
	if t.c.engine == "gomlx" { // the engine that trains also scores
		var err error
		e.gomlx, err = newGoMLXForward(s.spec, t.c)
		return e, err
	}
	t.buildMu.Lock()
	defer t.buildMu.Unlock()
	p, err := model.NewParams(s.spec, uint64(t.c.seed))
	if err != nil {
		return nil, err
	}
	if e.net, err = p.Forward(s.spec, nil); err != nil {
		return nil, err
	}
	e.params, e.vm = p, gorgonia.NewTapeMachine(p.Graph)
	return e, nil
}

// close releases the evaluation graph's machine, or GoMLX's program.
func (e *evaluator) close() {
	switch {
	case e == nil:
	case e.gomlx != nil:
		e.gomlx.close()
	default:
		e.vm.Close()
	}
}

// evalDue reports whether the run evaluates after optimizer step step (Note
// [held-out evaluation]).
func (t *trainer) evalDue(e *evaluator, step, total int) bool {
	switch {
	case e == nil:
		return false
	case step >= total:
		return true
	case t.c.given("eval-every"):
		return t.c.evalEvery > 0 && step%t.c.evalEvery == 0
	}
	k := t.c.gradAccum
	return step*k/e.perEp > (step-1)*k/e.perEp // an epoch ended in this step's micro-batches
}

// evaluate scores params on the held-out set; every rank calls it at the
// same step, and gets the same result.
func (e *evaluator) evaluate(ctx context.Context, g pg.ProcessGroup, params *model.Params, step int) (evalResult,
	error) {
	if err := e.load(params); err != nil {
		return evalResult{}, err
	}
	var sum float64
	var correct int
	idx := make([]int, 0, e.spec.Batch)
	for lo := e.lo; lo < e.hi; lo += e.spec.Batch {
		idx = idx[:0]
		for k := lo; k < min(lo+e.spec.Batch, e.hi); k++ {
			idx = append(idx, k)
		}
		x, y := e.x[:len(idx)*e.ds.D], e.y[:len(idx)]
		e.ds.Gather(idx, x, y)
		logits, err := e.logits(x, y)
		if err != nil {
			return evalResult{}, fmt.Errorf("evaluating: %w", err)
		}
		sum += crossEntropySum(logits, y, e.spec.Classes)
		correct += model.CorrectRows(logits, y, e.spec.Classes)
	}
	v := []float64{sum, float64(correct), float64(e.hi - e.lo)}
	if err := g.AllReduce(ctx, pg.Float64s(v), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return evalResult{}, fmt.Errorf("summing the evaluation over ranks: %w", err)
	}
	r := evalResult{Step: step, Loss: v[0] / v[2], Accuracy: v[1] / v[2], Samples: int(v[2])}
	e.last = &r
	return r, nil
}

// load gives the evaluation's model params' current values.
func (e *evaluator) load(params *model.Params) error {
	if e.gomlx != nil {
		return e.gomlx.load(params)
	}
	for i := range params.Len() {
		if err := e.params.SetValue(i, params.Value(i)); err != nil {
			return err
		}
	}
	return nil
}

// logits are the model's logits for one batch of rows x, as float64.
func (e *evaluator) logits(x []float64, y []int) ([]float64, error) {
	if e.gomlx != nil {
		return e.gomlx.logits(x, len(y))
	}
	if err := e.net.Feed(e.spec, x, y); err != nil {
		return nil, err
	}
	err := e.vm.RunAll()
	e.vm.Reset()
	if err != nil {
		return nil, err
	}
	return e.net.LogitsValue()[:len(y)*e.spec.Classes], nil
}

// crossEntropySum is Σ_i CE_i over the rows of labels, in float64:
// CE_i = log Σ_c exp(z_ic − m_i) − (z_iy − m_i), m_i the row's maximum.
func crossEntropySum(logits []float64, labels []int, classes int) float64 {
	var sum float64
	for r, label := range labels {
		row := logits[r*classes : (r+1)*classes]
		m := slices.Max(row)
		var s float64
		for _, z := range row {
			s += math.Exp(z - m)
		}
		sum += math.Log(s) - (row[label] - m)
	}
	return sum
}

// evalAt evaluates after step when it is due, and reports the result:
// the "eval" line (rank 0), the metrics and the bar.
// A run that a signal stops (stopping) does not evaluate on its way out.
func (t *trainer) evalAt(ctx context.Context, s *session, prog *progress, step, total int, stopping bool) error {
	if (stopping && step < total) || !t.evalDue(s.eval, step, total) {
		return nil
	}
	r, err := s.eval.evaluate(ctx, t.g, s.params, step)
	if err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	if t.g.Rank() == 0 {
		t.log.Info("eval", zap.Int("step", step), zap.Float64("eval_loss", r.Loss),
			zap.Float64("eval_accuracy", r.Accuracy), zap.Int("samples", r.Samples))
	}
	t.metrics.observeEval(r)
	prog.setEval(r)
	return nil
}

// finalEval evaluates a run that had no step to train, so that it too
// reports its model's figures, and returns the last evaluation (nil
// without one).
func (t *trainer) finalEval(ctx context.Context, s *session, prog *progress, total int) (*evalResult, error) {
	if s.eval == nil {
		return nil, nil
	}
	if s.eval.last == nil {
		if err := t.evalAt(ctx, s, prog, total, total, false); err != nil {
			return nil, err
		}
	}
	return s.eval.last, nil
}
