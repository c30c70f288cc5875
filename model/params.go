package model

import (
	"math"
	"math/rand/v2"

	"github.com/goddp/ddp/checkpoint"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Params is a model's graph and its parameters, before the forward graph
// exists. Nodes[i] is named Names[i]; each layer has a weight, then a
// bias, in forward order.
type Params struct {
	Graph *gorgonia.ExprGraph
	Nodes gorgonia.Nodes
	Names []string

	spec  Spec
	built bool // Forward has run
	// gorgoniaOps builds the graph from Gorgonia's own ops instead of
	// package layers': the reference the tests compare the layers with.
	gorgoniaOps bool
}

// NewParams creates the graph and the parameter nodes of spec's model,
// with values drawn deterministically from seed, as PyTorch's defaults
// draw them: weight and bias of a layer uniform in [-1/√fan_in, 1/√fan_in),
// fan_in being a linear layer's inputs or a convolution's C·kh·kw.
// Parameter i is drawn from the stream (seed, i), so every rank that
// passes the same seed builds the same model.
//
// The MLP's parameters are fc1.weight [in, out], fc1.bias [out], fc2.…,
// the last layer having Classes outputs; see the package documentation
// for the CNN.
func NewParams(spec Spec, seed uint64) (*Params, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	p := &Params{Graph: gorgonia.NewGraph(), spec: cloneSpec(spec)}
	for _, l := range spec.layers() {
		bound := 1 / math.Sqrt(float64(l.fanIn))
		p.add(l.name+".weight", l.weight, seed, bound)
		p.add(l.name+".bias", l.bias, seed, bound)
	}
	return p, nil
}

// add appends a parameter of the given shape, drawn from the stream
// (seed, its index).
func (p *Params) add(name string, shape []int, seed uint64, bound float64) {
	rng := rand.New(rand.NewPCG(seed, uint64(len(p.Nodes))))
	n := tensor.Shape(shape).TotalSize()
	var backing any
	if p.spec.Dtype == tensor.Float32 {
		v := make([]float32, n)
		for k := range v {
			v[k] = float32(bound * (2*rng.Float64() - 1))
		}
		backing = v
	} else {
		v := make([]float64, n)
		for k := range v {
			v[k] = bound * (2*rng.Float64() - 1)
		}
		backing = v
	}
	val := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
	node := gorgonia.NewTensor(p.Graph, p.spec.Dtype, len(shape), gorgonia.WithShape(shape...), gorgonia.WithName(name),
		gorgonia.WithValue(val))
	p.Nodes = append(p.Nodes, node)
	p.Names = append(p.Names, name)
}

// Spec returns the spec the parameters were made for.
func (p *Params) Spec() Spec { return cloneSpec(p.spec) }

// Len is the number of parameters.
func (p *Params) Len() int { return len(p.Nodes) }

// Shape, Value and SetValue are checkpoint.Nodes': the parameters as a
// checkpoint.Model, each node named as Names says.

// Shape returns parameter i's shape.
func (p *Params) Shape(i int) []int { return checkpoint.Nodes(p.Nodes).Shape(i) }

// Value returns a float64 copy of parameter i's value, row-major.
func (p *Params) Value(i int) []float64 { return checkpoint.Nodes(p.Nodes).Value(i) }

// SetValue copies v into parameter i's value in place, converted to the
// model's dtype (float32 values that went through Value come back
// exactly). v must have the parameter's number of elements.
func (p *Params) SetValue(i int, v []float64) error { return checkpoint.Nodes(p.Nodes).SetValue(i, v) }

// Index returns the index of the parameter called name, or -1.
func (p *Params) Index(name string) int {
	for i, n := range p.Names {
		if n == name {
			return i
		}
	}
	return -1
}

func cloneSpec(s Spec) Spec {
	s.InputShape = append([]int(nil), s.InputShape...)
	s.Hidden = append([]int(nil), s.Hidden...)
	return s
}

// Name returns parameter i's name.
func (p *Params) Name(i int) string { return p.Names[i] }

// Dtype names the model's dtype, "float32" or "float64".
func (p *Params) Dtype() string { return p.spec.Dtype.String() }
