package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Note [backward in several programs]
//
// One compiled program hands back its outputs when it ends, so every
// gradient becomes ready at once, after backward, and no bucket's
// reduction can overlap the computation (docs/gomlx.md). With
// --gomlx-programs per-layer the micro-batch runs as 1 + L programs for an
// MLP of L layers: the forward program (the loss, the logits, the loss's
// gradient δ and what each layer's backward needs: its input, and the
// hidden layers' z or tanh(z) and dropout mask), then one program per
// layer, last first, each turning δ into its layer's gradients and the δ
// of the layer below (layerBackward, the same arithmetic as the single
// program's). After each layer's program its two gradients go to the
// reducer, which launches a bucket's reduction as soon as it fills, while
// the next layer's program computes. On simplego the programs' outputs are
// host buffers, handed to the next program without a copy.

// forwardLayout says where the forward program puts each layer's saved
// values: in[l] is layer l's input, saved[l] and mask[l] (hidden layers)
// the z or tanh(z) and the dropout mask its backward needs (-1: none).
type forwardLayout struct {
	in, saved, mask []int
}

// layout is the forward program's output layout for this net: outputs
// 0, 1, 2 are the loss, the logits and δ.
func (n gomlxNet) layout() forwardLayout {
	layers := len(n.spec.Hidden) + 1
	f := forwardLayout{in: make([]int, layers), saved: make([]int, layers), mask: make([]int, layers)}
	next := 3
	for l := range layers {
		f.in[l], f.saved[l], f.mask[l] = next, -1, -1
		next++
		if l == layers-1 {
			break
		}
		f.saved[l] = next
		next++
		if n.dropout > 0 {
			f.mask[l] = next
			next++
		}
	}
	return f
}

// forwardProgram is the forward program of Note [backward in several
// programs]; its inputs are the single program's.
func (n gomlxNet) forwardProgram(inputs []*graph.Node) []*graph.Node {
	params, x, y, rng := n.inputs(inputs)
	tape, logits := n.denseForward(x, params, rng)
	loss, logits, delta := n.lossAndDelta(logits, y)
	out := []*graph.Node{loss, logits, delta}
	for l, t := range tape {
		out = append(out, t.in)
		if l == len(tape)-1 {
			break
		}
		if n.spec.Activation == "tanh" {
			out = append(out, t.a)
		} else {
			out = append(out, t.z)
		}
		if t.mask != nil {
			out = append(out, t.mask)
		}
	}
	return out
}

// backwardProgram is layer l's program: inputs its input h, its W (in the
// parameters' dtype), δ and, above the first layer, the layer below's
// saved value and mask; outputs the gradients of W and b and, above the
// first layer, the δ of the layer below.
func (n gomlxNet) backwardProgram(l int) func([]*graph.Node) []*graph.Node {
	return func(in []*graph.Node) []*graph.Node {
		t := denseLayer{in: in[0], w: graph.ConvertDType(in[1], n.compute)}
		var prev *denseLayer
		if l > 0 {
			prev = &denseLayer{z: in[3], a: in[3]}
			if len(in) > 4 {
				prev.mask = in[4]
			}
		}
		gW, gb, next := n.layerBackward(t, prev, in[2], l > 0)
		if next == nil {
			return []*graph.Node{gW, gb}
		}
		return []*graph.Node{gW, gb, next}
	}
}

// compileSplit makes the programs of Note [backward in several programs].
func (e *gomlxEngine) compileSplit() error {
	var err error
	if e.exec, err = graph.NewExec(e.backend, e.net.forwardProgram); err != nil {
		return err
	}
	e.layers = make([]*graph.Exec, len(e.net.spec.Hidden)+1)
	for l := range e.layers {
		if e.layers[l], err = graph.NewExec(e.backend, e.net.backwardProgram(l)); err != nil {
			return err
		}
	}
	e.lay = e.net.layout()
	return nil
}

// runSplit is micro's computation under Note [backward in several
// programs]: the forward program, then each layer's, its gradients handed
// to the reducer as they come.
func (e *gomlxEngine) runSplit(ctx context.Context, args []any, labels []int) (microOut, error) {
	var keep []*tensors.Tensor
	defer func() { finalizeAll(keep) }()
	var outs []*tensors.Tensor
	err := catch(func() error {
		var err error
		outs, err = e.exec.Exec(args...)
		return err
	})
	if err != nil {
		return microOut{}, e.r.Fail(fmt.Errorf("GoMLX forward: %w", err))
	}
	keep = append(keep, outs...)
	var out microOut
	if out.loss, err = scalarOf(outs[0]); err == nil {
		out.correct, err = correctOf(outs[1], labels)
	}
	if err != nil {
		return out, e.r.Fail(err)
	}
	e.r.MarkBackwardStart()
	add, delta := e.r.Accumulating(), outs[2]
	for l := len(e.layers) - 1; l >= 0; l-- {
		in := []any{outs[e.lay.in[l]], e.in[2*l], delta}
		if l > 0 {
			in = append(in, outs[e.lay.saved[l-1]])
			if m := e.lay.mask[l-1]; m >= 0 {
				in = append(in, outs[m])
			}
		}
		var grads []*tensors.Tensor
		if err := catch(func() error { var err error; grads, err = e.layers[l].Exec(in...); return err }); err != nil {
			return out, e.r.Fail(fmt.Errorf("GoMLX backward of layer %d: %w", l, err))
		}
		keep = append(keep, grads...)
		for _, i := range []int{2*l + 1, 2 * l} {
			if err := e.ready(i, grads[i-2*l], add); err != nil {
				return out, err
			}
		}
		if l > 0 {
			delta = grads[2]
		}
	}
	out.tapeEnd = time.Now()
	e.r.MarkBackwardEnd()
	return out, e.r.Finalize(ctx)
}
