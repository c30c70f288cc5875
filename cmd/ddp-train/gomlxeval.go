package main

import (
	"fmt"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/model"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// gomlxForward is --engine gomlx's held-out scorer: the model's forward
// pass as a GoMLX program of the parameters and a batch, in evaluation
// mode (no dropout), in the training program's compute dtype, its logits
// returned as float64 for the evaluator's float64 sums (eval.go).
type gomlxForward struct {
	backend backends.Backend
	exec    *graph.Exec
	in      []*tensors.Tensor
	net     gomlxNet
}

func newGoMLXForward(spec model.Spec, c config) (*gomlxForward, error) {
	net, err := newGoMLXNet(spec, c)
	if err != nil {
		return nil, err
	}
	net.dropout = 0 // evaluation mode
	f := &gomlxForward{net: net}
	if f.backend, err = simplego.New("ops_sequential"); err != nil {
		return nil, err
	}
	if f.exec, err = graph.NewExec(f.backend, net.logitsProgram); err != nil {
		f.backend.Finalize()
		return nil, err
	}
	return f, nil
}

// logitsProgram is the forward pass: inputs the parameters and the
// features [rows, D]; output the logits [rows, classes] as float64.
func (n gomlxNet) logitsProgram(inputs []*graph.Node) *graph.Node {
	np := len(inputs) - 1
	params := make([]*graph.Node, np)
	for i, p := range inputs[:np] {
		params[i] = graph.ConvertDType(p, n.compute)
	}
	x := graph.ConvertDType(inputs[np], n.compute)
	head := params
	if n.spec.Kind == "cnn" {
		x, head, _ = n.cnnFeatures(x, params)
	}
	_, logits := n.denseForward(x, head, nil)
	return graph.ConvertDType(logits, dtypes.Float64)
}

// load copies params' current values into the program's inputs, once
// per evaluation.
func (f *gomlxForward) load(params *model.Params) error {
	if f.in == nil {
		for i := range params.Len() {
			f.in = append(f.in, tensors.FromShape(f.net.paramShape(params.Shape(i))))
		}
	}
	for i, in := range f.in {
		v, err := gtensor.TensorOf(params.Nodes[i].Value())
		if err == nil {
			err = copyIn(in, v)
		}
		if err != nil {
			return fmt.Errorf("parameter %s into GoMLX: %w", params.Name(i), err)
		}
	}
	return nil
}

// logits runs the program on the loaded parameters and rows of x.
func (f *gomlxForward) logits(x []float64, rows int) ([]float64, error) {
	args := make([]any, 0, len(f.in)+1)
	for _, in := range f.in {
		args = append(args, in)
	}
	var out *tensors.Tensor
	err := catch(func() error {
		var err error
		out, err = f.exec.Exec1(append(args, f.net.batch(x, rows))...)
		return err
	})
	if err != nil {
		return nil, err
	}
	defer out.FinalizeAll()
	return tensors.CopyFlatData[float64](out)
}

func (f *gomlxForward) close() {
	f.exec.Finalize()
	f.backend.Finalize()
	for _, in := range f.in {
		in.FinalizeAll()
	}
}
