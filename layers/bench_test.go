package layers_test

import (
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BenchmarkLenetConvBlocks runs forward and backward of LeNet-5's two
// convolution blocks (28×28 input, batch 32, float32) through a tape
// machine, with this package's Conv2d and MaxPool2d (ours) and with
// Gorgonia's Conv2d, broadcast bias and MaxPool2D (gorgonia), as the model
// zoo built them. Compare the two in one run:
//
//	go test ./layers/ -run '^$' -bench LenetConvBlocks -benchmem -count 5
func BenchmarkLenetConvBlocks(b *testing.B) {
	for _, impl := range []struct {
		name string
		ours bool
	}{{"ours", true}, {"gorgonia", false}} {
		b.Run(impl.name, func(b *testing.B) {
			net := newLenet(b, tensor.Float32, 32, 28, impl.ours, false)
			vm := gorgonia.NewTapeMachine(net.g)
			defer func() { _ = vm.Close() }()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
