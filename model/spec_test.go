package model

import (
	"errors"
	"math"
	"slices"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestValidateRejectsBadSpecs(t *testing.T) {
	good := Spec{Kind: "mlp", InputShape: []int{1, 28, 28}, Hidden: []int{16}, Activation: "relu", Classes: 10,
		Dtype: tensor.Float32, Batch: 8}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good spec: %v", err)
	}
	for name, edit := range map[string]func(*Spec){
		"kind":              func(s *Spec) { s.Kind = "rnn" },
		"no input shape":    func(s *Spec) { s.InputShape = nil },
		"zero input size":   func(s *Spec) { s.InputShape = []int{0} },
		"zero hidden":       func(s *Spec) { s.Hidden = []int{16, 0} },
		"activation":        func(s *Spec) { s.Activation = "gelu" },
		"no classes":        func(s *Spec) { s.Classes = 0 },
		"dtype":             func(s *Spec) { s.Dtype = tensor.Int64 },
		"batch":             func(s *Spec) { s.Batch = 0 },
		"cnn on flat input": func(s *Spec) { s.Kind, s.InputShape = "cnn", []int{784} },
		"huge input":        func(s *Spec) { s.InputShape = []int{1 << 20, 1 << 20} },
		"huge hidden":       func(s *Spec) { s.Hidden = []int{1 << 40} },
		"huge model":        func(s *Spec) { s.Hidden = []int{1 << 16, 1 << 16} },
		"huge classes":      func(s *Spec) { s.Classes = 1 << 62 },
		"cnn image too small": func(s *Spec) {
			s.Kind, s.InputShape = "cnn", []int{1, 11, 28}
		},
	} {
		s := good
		edit(&s)
		if err := s.Validate(); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: Validate gave %v; want ErrBadSpec", name, err)
		}
		if _, err := NewParams(s, 1); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: NewParams gave %v; want ErrBadSpec", name, err)
		}
	}
}

func TestMLPParameters(t *testing.T) {
	spec := Spec{Kind: "mlp", InputShape: []int{1, 28, 28}, Hidden: []int{512, 256}, Activation: "relu", Classes: 10,
		Dtype: tensor.Float64, Batch: 2}
	p, err := NewParams(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}
	wantShapes := [][]int{{784, 512}, {512}, {512, 256}, {256}, {256, 10}, {10}}
	if !slices.Equal(p.Names, wantNames) {
		t.Fatalf("names %v, want %v", p.Names, wantNames)
	}
	for i, s := range wantShapes {
		if !slices.Equal(p.Shape(i), s) || p.Nodes[i].Name() != wantNames[i] {
			t.Errorf("%s: node %q shape %v, want %v", wantNames[i], p.Nodes[i].Name(), p.Shape(i), s)
		}
	}
}

// Values are U(-1/√fan_in, 1/√fan_in), the same for the same seed,
// different for another, and a float32 model holds the float64 model's
// values rounded.
func TestInitIsDeterministicAndScaled(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 1, 300)
	a, _ := NewParams(spec, 42)
	b, _ := NewParams(spec, 42)
	c, _ := NewParams(spec, 43)
	spec32 := spec
	spec32.Dtype = tensor.Float32
	d, _ := NewParams(spec32, 42)
	fanIn := []int{3, 3, 300, 300}
	for i := range a.Nodes {
		va := a.Value(i)
		if !slices.Equal(va, b.Value(i)) || slices.Equal(va, c.Value(i)) {
			t.Errorf("%s: seeds 42, 42, 43 don't give equal, equal, different values", a.Names[i])
		}
		bound, top := 1/math.Sqrt(float64(fanIn[i])), 0.0
		for k, v := range va {
			top = max(top, math.Abs(v))
			if d.Value(i)[k] != float64(float32(v)) {
				t.Fatalf("%s[%d]: float32 model holds %v, want %v rounded", a.Names[i], k, d.Value(i)[k], v)
			}
		}
		if top > bound || (len(va) >= 100 && top < 0.9*bound) {
			t.Errorf("%s: largest |value| %v for bound %v", a.Names[i], top, bound)
		}
	}
}

func TestForwardChecksItsArguments(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 2, 4)
	p, _ := NewParams(spec, 1)
	other := spec
	other.Hidden = []int{5}
	if _, err := p.Forward(other, nil); !errors.Is(err, ErrBadSpec) {
		t.Errorf("a spec of another model: %v", err)
	}
	if _, err := p.Forward(spec, func(int) *gorgonia.Node { return nil }); err == nil {
		t.Error("use returning nil was accepted")
	}
	q, _ := NewParams(spec, 1)
	bigger := spec
	bigger.Batch = 7 // the batch may differ from NewParams'
	if _, err := q.Forward(bigger, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Forward(bigger, nil); err == nil {
		t.Error("a second Forward on the same Params was accepted")
	}
}
