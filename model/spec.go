package model

import (
	"errors"
	"fmt"
	"slices"

	"gorgonia.org/tensor"
)

// ErrBadSpec is wrapped by every error about a Spec that describes no
// model this package can build.
var ErrBadSpec = errors.New("model: bad model spec")

// ErrBadInit is wrapped by every error about initial parameter files that
// don't fit the model: a missing file, a wrong shape, an unreadable or
// non-finite value. ddp-train exits 2 on it.
var ErrBadInit = errors.New("model: bad initial parameters")

// Spec describes a model. The same Spec goes to NewParams, Forward and
// Feed.
type Spec struct {
	Kind       string       // "mlp" or "cnn"
	InputShape []int        // per-sample shape: [D] for mlp (any shape is flattened); [C,H,W] for cnn, H and W at least 12
	Hidden     []int        // mlp hidden sizes, e.g. [512, 512]; empty for a single linear layer; the cnn ignores it
	Activation string       // "relu" or "tanh"
	Classes    int          // outputs, at least 1
	Dtype      tensor.Dtype // tensor.Float32 or tensor.Float64
	Batch      int          // rows of the graph's fixed batch, at least 1
}

// The CNN's fixed architecture (LeNet-5 with a padded first convolution,
// as in the usual PyTorch MNIST LeNet).
const (
	convKernel = 5
	conv1Out   = 6
	conv1Pad   = 2 // keeps H×W, so 28×28 stays 28×28
	conv2Out   = 16
	poolSize   = 2
	cnnFC1     = 120
	cnnFC2     = 84
)

// Validate reports what is wrong with s, wrapping ErrBadSpec.
func (s Spec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSpec, fmt.Sprintf(format, args...))
	}
	switch s.Kind {
	case "mlp", "cnn":
	default:
		return bad("kind %q: want mlp or cnn", s.Kind)
	}
	if len(s.InputShape) == 0 || slices.ContainsFunc(s.InputShape, func(d int) bool { return d < 1 }) {
		return bad("input shape %v: want one or more positive sizes", s.InputShape)
	}
	if s.Kind == "cnn" {
		if len(s.InputShape) != 3 {
			return bad("cnn input shape %v: want [channels, height, width], e.g. [1,28,28]", s.InputShape)
		}
		if h, w := s.InputShape[1], s.InputShape[2]; h < 12 || w < 12 {
			return bad("cnn input %dx%d: the two 5x5 convolutions and 2x2 pools need at least 12x12", h, w)
		}
	}
	if s.Kind == "mlp" && slices.ContainsFunc(s.Hidden, func(d int) bool { return d < 1 }) {
		return bad("hidden sizes %v: each must be at least 1", s.Hidden)
	}
	if s.Activation != "relu" && s.Activation != "tanh" {
		return bad("activation %q: want relu or tanh", s.Activation)
	}
	if s.Classes < 1 {
		return bad("%d classes: want at least 1", s.Classes)
	}
	if s.Dtype != tensor.Float32 && s.Dtype != tensor.Float64 {
		return bad("dtype %v: want float32 or float64", s.Dtype)
	}
	if s.Batch < 1 {
		return bad("batch %d: want at least 1", s.Batch)
	}
	return s.checkSize()
}

// maxElements caps every tensor's and the whole model's element count, so
// that absurd sizes fail here rather than exhaust memory.
const maxElements = 1 << 31

// checkSize checks that the inputs and the parameters fit in maxElements.
func (s Spec) checkSize() error {
	features, ok := product(s.InputShape...)
	if _, okBatch := product(s.Batch, features); !ok || !okBatch {
		return fmt.Errorf("%w: a batch of %d inputs of shape %v is over %d values", ErrBadSpec, s.Batch, s.InputShape,
			maxElements)
	}
	for _, h := range append([]int{s.Classes}, s.Hidden...) {
		if _, ok := product(s.Batch, h); !ok {
			return fmt.Errorf("%w: a layer of %d outputs is too large", ErrBadSpec, h)
		}
	}
	total := 0
	for _, l := range s.layers() {
		w, okW := product(l.weight...)
		b, okB := product(l.bias...)
		if total += w + b; !okW || !okB || total > maxElements {
			return fmt.Errorf("%w: the model has over %d parameters", ErrBadSpec, maxElements)
		}
	}
	return nil
}

// product multiplies dims, and reports whether it stayed within
// maxElements.
func product(dims ...int) (int, bool) {
	n := 1
	for _, d := range dims {
		if d < 0 || d > 0 && n > maxElements/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// Features is the number of values per sample: the product of InputShape.
func (s Spec) Features() int {
	n, _ := product(s.InputShape...)
	return n
}

// layer is one parameterised layer: its weight and bias shapes, and the
// fan-in that scales their initial values.
type layer struct {
	name   string
	weight []int
	bias   []int
	fanIn  int
}

// layers lists the model's layers in forward order. s must be valid.
// NumParams is how many values the parameters of s's model hold, counted
// without building them; s must be valid (Validate).
func (s Spec) NumParams() int64 {
	var n int64
	for _, l := range s.layers() {
		for _, shape := range [][]int{l.weight, l.bias} {
			k := int64(1)
			for _, d := range shape {
				k *= int64(d)
			}
			n += k
		}
	}
	return n
}

func (s Spec) layers() []layer {
	var ls []layer
	in := s.Features()
	var fcs []int
	if s.Kind == "cnn" {
		c, h, w := s.InputShape[0], s.InputShape[1], s.InputShape[2]
		k := convKernel
		ls = append(ls,
			layer{"conv1", []int{conv1Out, c, k, k}, []int{conv1Out}, c * k * k},
			layer{"conv2", []int{conv2Out, conv1Out, k, k}, []int{conv2Out}, conv1Out * k * k})
		h2, w2 := cnnSide(h), cnnSide(w)
		in = conv2Out * h2 * w2
		fcs = []int{cnnFC1, cnnFC2}
	} else {
		fcs = s.Hidden
	}
	sizes := append(append([]int{in}, fcs...), s.Classes)
	for l := 1; l < len(sizes); l++ {
		ls = append(ls, layer{fmt.Sprintf("fc%d", l), []int{sizes[l-1], sizes[l]}, []int{sizes[l]}, sizes[l-1]})
	}
	return ls
}

// ParamNames are the names NewParams gives the parameters of a model of
// kind ("mlp" or "cnn") with hidden hidden layers (the MLP's; the CNN has
// its own), in order: what SaveNPY writes, one <name>.npy each, known
// before the data that gives the model its sizes.
func ParamNames(kind string, hidden int) []string {
	layers := hidden + 1
	var names []string
	if kind == "cnn" {
		names = []string{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"}
		layers = 3
	}
	for l := 1; l <= layers; l++ {
		names = append(names, fmt.Sprintf("fc%d.weight", l), fmt.Sprintf("fc%d.bias", l))
	}
	return names
}

// cnnSide is the height (or width) of the second pool's output for an
// input side of n: conv1 keeps n, pool halves it (floor), conv2 takes 4
// off, pool halves again.
func cnnSide(n int) int {
	n = (n-poolSize)/poolSize + 1
	n -= convKernel - 1
	return (n-poolSize)/poolSize + 1
}
