package model

import (
	"fmt"
	"math"

	"github.com/goddp/ddp/internal/vec"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Feed binds one batch to the graph's inputs: x holds n rows of
// spec.Features() values, row-major, and labels their n classes, with
// 1 <= n <= spec.Batch. A short batch is padded with zero rows whose
// target and loss weight are 0, so they add exactly nothing to the loss
// or the gradients: the fixed-shape graph computes the mean over the n
// real rows, as PyTorch does for an epoch's short last batch.
//
// Feed keeps no reference to x or labels. It binds fresh tensor headers
// over backings of its own that every Feed overwrites whole (Note [feed
// buffers]), so a value read from X, Y or W after a run is valid only
// until the next Feed.
func (n *Net) Feed(spec Spec, x []float64, labels []int) error {
	if err := n.checkFeed(spec, x, labels); err != nil {
		return err
	}
	var err error
	if n.spec.Dtype == tensor.Float32 {
		err = feedAs(n, &n.feed.f32, vec.F64ToF32, x, labels)
	} else {
		err = feedAs(n, &n.feed.f64, func(dst, src []float64) { copy(dst, src) }, x, labels)
	}
	if err != nil {
		return err
	}
	n.rows = len(labels)
	return nil
}

// Note [feed buffers]: the inputs' memory is allocated by the first Feed
// and refilled by every later one, which saves a step three allocations of
// the batch's size (and their clearing and collection). That is safe
// because the machine reads an input only while it runs, and Feed runs
// between runs. Feed writes every element, padding included, because an
// op of the run may have written into an input's memory in place; and it
// binds a new tensor header each time, because such an op may also have
// changed the bound tensor's shape.

// feedBuffers are the backings of X, Y and W, in the net's dtype.
type feedBuffers struct {
	f32 [3][]float32
	f64 [3][]float64
}

func (n *Net) checkFeed(spec Spec, x []float64, labels []int) error {
	s := n.spec
	rows, d := len(labels), s.Features()
	switch {
	case spec.Features() != d || spec.Batch != s.Batch || spec.Classes != s.Classes:
		return fmt.Errorf(
			"model: Feed: spec (batch %d, %d features, %d classes) is not the net's (batch %d, %d features, %d classes)",
			spec.Batch, spec.Features(), spec.Classes, s.Batch, d, s.Classes)
	case rows == 0:
		return fmt.Errorf("model: Feed: empty batch; pass 1 to %d rows", s.Batch)
	case rows > s.Batch:
		return fmt.Errorf("model: Feed: %d rows for a graph of batch %d; split the batch", rows, s.Batch)
	case len(x) != rows*d:
		return fmt.Errorf("model: Feed: %d feature values for %d labels; want %d×%d = %d", len(x), rows, rows, d, rows*d)
	}
	for r, c := range labels {
		if c < 0 || c >= s.Classes {
			return fmt.Errorf("model: Feed: row %d has label %d; labels must lie in [0, %d)", r, c, s.Classes)
		}
	}
	return nil
}

// feedAs fills bufs (X's, Y's and W's backings) from a checked batch, each
// value rounded once to T (conv converts x's values), and binds them.
func feedAs[T float32 | float64](n *Net, bufs *[3][]T, conv func([]T, []float64), x []float64, labels []int) error {
	s := n.spec
	d := s.Features()
	xs, ys, ws := resize(&bufs[0], s.Batch*d), resize(&bufs[1], s.Batch*s.Classes), resize(&bufs[2], s.Batch)
	conv(xs[:len(x)], x)
	clear(xs[len(x):])
	clear(ys)
	clear(ws)
	w := T(1 / float64(len(labels)))
	for r, c := range labels {
		ys[r*s.Classes+c] = 1
		ws[r] = w
	}
	if err := let(n.X, xs, s.Batch, d); err != nil {
		return err
	}
	if err := let(n.Y, ys, s.Batch, s.Classes); err != nil {
		return err
	}
	return let(n.W, ws, s.Batch)
}

// resize returns *buf with n elements, allocating only when it is short.
func resize[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// let binds a new tensor header over v, of the given shape, to node.
func let[T float32 | float64](node *gorgonia.Node, v []T, shape ...int) error {
	if err := gorgonia.Let(node, tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))); err != nil {
		return fmt.Errorf("model: Feed: binding %s: %w", node.Name(), err)
	}
	return nil
}

// Correct returns how many of the first len(labels) rows the last run
// classified right: the largest logit (the first, on ties) is the label.
// Call it after RunAll, with the labels given to Feed. Rows beyond the
// batch, and every row before any run, count as wrong.
func (n *Net) Correct(labels []int) int {
	return CorrectRows(floats(n.logits), labels, n.spec.Classes)
}

// CorrectRows counts the rows of logits ([rows, classes], row-major)
// whose largest logit (the first, on ties) is their label's; labels past
// the last whole row count as wrong.
func CorrectRows(logits []float64, labels []int, classes int) int {
	right := 0
	for r, label := range labels {
		if (r+1)*classes > len(logits) {
			break
		}
		row := logits[r*classes : (r+1)*classes]
		best := 0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		if best == label {
			right++
		}
	}
	return right
}

// LossValue returns the loss of the last run (the mean cross-entropy over
// the rows fed), or NaN before any run.
func (n *Net) LossValue() float64 {
	if v := floats(n.loss); len(v) == 1 {
		return v[0]
	}
	return math.NaN()
}

// LogitsValue returns a copy of the last run's logits, [Batch, Classes]
// row-major (padding rows included), or nil before any run. Read logits
// here, not from Logits.Value(): the machine may reuse that register later
// in the run.
func (n *Net) LogitsValue() []float64 { return floats(n.logits) }

// floats returns v's elements as float64s, or nil.
func floats(v gorgonia.Value) []float64 {
	if v == nil {
		return nil
	}
	switch v := v.(type) {
	case *gorgonia.F32:
		return []float64{float64(*v)}
	case *gorgonia.F64:
		return []float64{float64(*v)}
	}
	switch data := v.Data().(type) {
	case []float32:
		out := make([]float64, len(data))
		for k, x := range data {
			out[k] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), data...)
	case float32:
		return []float64{float64(data)}
	case float64:
		return []float64{data}
	}
	return nil
}
