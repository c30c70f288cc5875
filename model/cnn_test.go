package model

import (
	"math"
	"slices"
	"testing"

	"gorgonia.org/tensor"
)

func cnnSpec(dt tensor.Dtype, batch int) Spec {
	return Spec{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "tanh", Classes: 10, Dtype: dt, Batch: batch}
}

func TestCNNParameters(t *testing.T) {
	p, err := NewParams(cnnSpec(tensor.Float64, 2), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		shape []int
	}{
		{"conv1.weight", []int{6, 1, 5, 5}}, {"conv1.bias", []int{6}},
		{"conv2.weight", []int{16, 6, 5, 5}}, {"conv2.bias", []int{16}},
		{"fc1.weight", []int{400, 120}}, {"fc1.bias", []int{120}},
		{"fc2.weight", []int{120, 84}}, {"fc2.bias", []int{84}},
		{"fc3.weight", []int{84, 10}}, {"fc3.bias", []int{10}},
	}
	if len(p.Names) != len(want) {
		t.Fatalf("parameters %v, want %d", p.Names, len(want))
	}
	for i, w := range want {
		if p.Names[i] != w.name || !slices.Equal(p.Shape(i), w.shape) {
			t.Errorf("parameter %d: %s %v, want %s %v", i, p.Names[i], p.Shape(i), w.name, w.shape)
		}
	}
}

// The CNN runs forward and backward on 28×28 images in both dtypes, and
// on an odd size the pools floor.
func TestCNNRuns(t *testing.T) {
	for _, spec := range []Spec{cnnSpec(tensor.Float32, 3), cnnSpec(tensor.Float64, 3),
		{Kind: "cnn", InputShape: []int{3, 13, 17}, Activation: "relu", Classes: 3, Dtype: tensor.Float32, Batch: 2}} {
		m := newPlain(t, spec, 1)
		x, labels := data(spec, spec.Batch-1, 2)
		loss, grads := m.run(t, x, labels)
		if !(loss > 0) || math.IsInf(loss, 0) {
			t.Errorf("%v %v: loss %v", spec.InputShape, spec.Dtype, loss)
		}
		for i, g := range grads {
			if len(g) != len(m.p.Value(i)) ||
				slices.ContainsFunc(g, func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }) {
				t.Errorf("%v %v: gradient of %s: %d values, some not finite", spec.InputShape, spec.Dtype, m.p.Names[i], len(g))
			}
		}
		if slices.IndexFunc(grads[0], func(v float64) bool { return v != 0 }) < 0 {
			t.Errorf("%v: conv1.weight's gradient is all zero", spec.InputShape)
		}
	}
}

// The CNN's gradient matches central differences of the loss, float64.
func TestCNNGradientMatchesFiniteDifferences(t *testing.T) {
	spec := cnnSpec(tensor.Float64, 2)
	m := newPlain(t, spec, 3)
	x, labels := data(spec, 2, 4)
	_, grads := m.run(t, x, labels)
	const h = 1e-6
	for _, c := range []struct {
		name string
		elem int
	}{{"conv1.weight", 0}, {"conv1.weight", 77}, {"conv1.bias", 3}, {"conv2.weight", 1234}, {"conv2.bias", 15},
		{"fc1.weight", 4321}, {"fc3.bias", 9}} {
		i := m.p.Index(c.name)
		v := m.p.Value(i)
		orig := v[c.elem]
		lossAt := func(delta float64) float64 {
			v[c.elem] = orig + delta
			if err := m.p.SetValue(i, v); err != nil {
				t.Fatal(err)
			}
			loss, _ := m.run(t, x, labels)
			return loss
		}
		numeric := (lossAt(h) - lossAt(-h)) / (2 * h)
		lossAt(0)
		analytic := grads[i][c.elem]
		if math.Abs(numeric-analytic) > 1e-5*math.Abs(analytic)+1e-9 || analytic == 0 {
			t.Errorf("%s[%d]: gradient %.10g, finite difference %.10g", c.name, c.elem, analytic, numeric)
		}
	}
}
