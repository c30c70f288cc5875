package checkpoint

import (
	"fmt"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Model is what Capture reads and Restore writes: a model's parameters,
// by index, each with a unique name. Values travel as float64 and go back
// to the model's own dtype (float32 values come back exactly).
type Model interface {
	Len() int
	Name(i int) string
	Shape(i int) []int
	Dtype() string // "float32" or "float64"; "" if mixed or unknown
	Value(i int) []float64
	SetValue(i int, v []float64) error
}

// Nodes is a Gorgonia model's parameter nodes as a Model, each named by
// its node's name. Every node must have a float32 or float64 value.
type Nodes gorgonia.Nodes

// Len is the number of parameters.
func (n Nodes) Len() int { return len(n) }

// Name is parameter i's node name.
func (n Nodes) Name(i int) string { return n[i].Name() }

// Shape is parameter i's shape.
func (n Nodes) Shape(i int) []int { return append([]int(nil), n[i].Shape()...) }

// Dtype is the parameters' dtype, if they share one.
func (n Nodes) Dtype() string {
	dt := ""
	for i, node := range n {
		var s string
		switch node.Dtype() {
		case tensor.Float32:
			s = "float32"
		case tensor.Float64:
			s = "float64"
		}
		if i > 0 && s != dt {
			return ""
		}
		dt = s
	}
	return dt
}

// Value returns a float64 copy of parameter i's value, row-major.
func (n Nodes) Value(i int) []float64 {
	if n[i].Value() == nil {
		return nil
	}
	switch data := n[i].Value().Data().(type) {
	case []float32:
		out := make([]float64, len(data))
		for k, x := range data {
			out[k] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), data...)
	}
	return nil
}

// SetValue copies v into parameter i's value in place, converted to its
// dtype. v must have the parameter's number of elements.
func (n Nodes) SetValue(i int, v []float64) error {
	if i < 0 || i >= len(n) {
		return fmt.Errorf("checkpoint: parameter %d: the model has %d", i, len(n))
	}
	if n[i].Value() == nil {
		return fmt.Errorf("checkpoint: %s has no value to restore into; give every parameter a value first", n[i].Name())
	}
	switch data := n[i].Value().Data().(type) {
	case []float32:
		if len(v) != len(data) {
			return n.sizeError(i, len(v))
		}
		for k, x := range v {
			data[k] = float32(x)
		}
	case []float64:
		if len(v) != len(data) {
			return n.sizeError(i, len(v))
		}
		copy(data, v)
	default:
		return fmt.Errorf("checkpoint: %s has dtype %v; checkpoints hold float32 or float64 parameters", n[i].Name(),
			n[i].Dtype())
	}
	return nil
}

func (n Nodes) sizeError(i, got int) error {
	return fmt.Errorf("checkpoint: %s: %d values for a parameter of shape %v (%d values)", n[i].Name(), got, n[i].Shape(),
		n[i].Shape().TotalSize())
}
