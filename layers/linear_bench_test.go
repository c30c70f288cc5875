package layers

import (
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The ops on the CNN's largest activation, conv1's output at batch 64
// ([64, 6, 28, 28] float32), and the MLP's widest product
// ([64, 784]·[784, 512]).
func BenchmarkOps(b *testing.B) {
	act := filled(tensor.Float32, 1, 64, 6, 28, 28)
	x, w, bias, dz := filled(tensor.Float32, 1, 64, 784), filled(tensor.Float32, 2, 784, 512),
		filled(tensor.Float32, 3, 512), filled(tensor.Float32, 4, 64, 512)
	for _, c := range []struct {
		name string
		op   interface {
			Do(...gorgonia.Value) (gorgonia.Value, error)
		}
		args []gorgonia.Value
	}{
		{"relu", &actOp{kind: relu}, []gorgonia.Value{act}},
		{"relu-grad", &actOp{kind: relu, grad: true}, []gorgonia.Value{act, act}},
		{"tanh", &actOp{kind: tanh}, []gorgonia.Value{act}},
		{"tanh-grad", &actOp{kind: tanh, grad: true}, []gorgonia.Value{act, act}},
		{"linear-64x784x512", &linearOp{bias: true}, []gorgonia.Value{x, w, bias}},
		{"linear-dw", &linearGradOp{weight: true}, []gorgonia.Value{x, dz}},
		{"linear-dx", &linearGradOp{}, []gorgonia.Value{dz, w}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.op.Do(c.args...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
