package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gorgonia.org/tensor"
)

// CardFile is the model card's name in a --save directory and in every
// checkpoint: Note [model cards].
const CardFile = "model-card.json"

// CardFormat is Card.Format: the only format ReadCard and ParseCard take.
const CardFormat = "goddp-model-card/1"

// ErrNoCard is wrapped by ReadCard's error for a directory without a card
// (a save from before cards, or .npy files another tool wrote).
var ErrNoCard = errors.New("model: no model card")

// Note [model cards]
//
// A saved model is its parameters and a card that says, completely, what
// computes with them: the kind, the per-sample input shape, the hidden
// sizes, the activation, the classes, the dtype, how the data loader made
// the features from the files (InputScaling: IDX pixels are x/255), and
// the layers in forward order with every setting a re-implementation needs
// (padding, stride, pooling, the flatten order, the weights' layouts). The
// fields Spec takes (Kind, InputShape, Hidden, Activation, Classes, Dtype)
// are the card's truth: SpecFromCard reads them and Layers must be what
// they give (ParseCard checks that), so a card can never describe one
// model and load another. A run that loads a model takes the
// architecture from its card; a flag given explicitly that disagrees with
// the card is refused naming the field (Card.Check). Batch is not the
// model's, so the card has none.

// Card describes a saved model: Note [model cards].
type Card struct {
	Format       string      `json:"format"` // CardFormat
	Kind         string      `json:"kind"`   // "mlp" or "cnn"
	InputShape   []int       `json:"input_shape"`
	Hidden       []int       `json:"hidden"` // the mlp's hidden sizes; empty for the cnn, whose sizes are fixed
	Activation   string      `json:"activation"`
	Classes      int         `json:"classes"`
	Dtype        string      `json:"dtype"`                   // "float32" or "float64"
	InputFormat  string      `json:"input_format,omitempty"`  // "idx", "npy" or "synthetic": what the loader read
	InputScaling string      `json:"input_scaling,omitempty"` // feature = f(file value): "x/255" for idx pixels, "x"
	Layers       []CardLayer `json:"layers"`
	Parameters   []CardParam `json:"parameters"` // in order, each saved as <name>.npy
	Output       string      `json:"output"`     // what the last layer gives
}

// CardLayer is one step of the forward pass. Shapes are per sample.
type CardLayer struct {
	Op       string `json:"op"`             // conv2d, linear, relu, tanh, maxpool2d or flatten
	Name     string `json:"name,omitempty"` // parameterised layers: the prefix of <name>.weight, <name>.bias
	InShape  []int  `json:"in_shape"`
	OutShape []int  `json:"out_shape"`
	Kernel   []int  `json:"kernel,omitempty"`
	Stride   []int  `json:"stride,omitempty"`
	Padding  []int  `json:"padding,omitempty"`  // zeros added on each side, [height, width]
	Dilation []int  `json:"dilation,omitempty"` // conv2d
	Weight   string `json:"weight,omitempty"`   // the weight's layout, and how torch's relates to it
	Order    string `json:"order,omitempty"`    // flatten: the order of the values
}

// CardParam is one parameter as saved.
type CardParam struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
}

// Card describes s's model. InputFormat and InputScaling are the data
// loader's, so the caller sets them. s must be valid (Validate).
func (s Spec) Card() Card {
	c := Card{Format: CardFormat, Kind: s.Kind, InputShape: slices.Clone(s.InputShape), Hidden: []int{},
		Activation: s.Activation, Classes: s.Classes, Dtype: s.Dtype.String(),
		Output: "logits [classes]; the loss is the mean softmax cross-entropy over the batch"}
	if s.Kind == "mlp" {
		c.Hidden = append(c.Hidden, s.Hidden...)
	}
	for _, l := range s.layers() {
		c.Parameters = append(c.Parameters, CardParam{l.name + ".weight", slices.Clone(l.weight)},
			CardParam{l.name + ".bias", slices.Clone(l.bias)})
	}
	c.Layers = s.cardLayers()
	return c
}

// cardLayers is the forward pass of forward.go, layer by layer.
func (s Spec) cardLayers() []CardLayer {
	var ls []CardLayer
	shape := slices.Clone(s.InputShape)
	act := func() { ls = append(ls, CardLayer{Op: s.Activation, InShape: shape, OutShape: shape}) }
	fcs := s.Hidden
	if s.Kind == "cnn" {
		k := convKernel
		for i, conv := range []struct{ out, pad int }{{conv1Out, conv1Pad}, {conv2Out, 0}} {
			out := []int{conv.out, shape[1] + 2*conv.pad - k + 1, shape[2] + 2*conv.pad - k + 1}
			ls = append(ls, CardLayer{Op: "conv2d", Name: fmt.Sprintf("conv%d", i+1), InShape: shape, OutShape: out,
				Kernel: []int{k, k}, Stride: []int{1, 1}, Padding: []int{conv.pad, conv.pad}, Dilation: []int{1, 1},
				Weight: "[out_channels, in_channels, kh, kw], as torch's Conv2d; cross-correlation, bias added per channel"})
			shape = out
			act()
			pooled := []int{shape[0], (shape[1]-poolSize)/poolSize + 1, (shape[2]-poolSize)/poolSize + 1}
			ls = append(ls, CardLayer{Op: "maxpool2d", InShape: shape, OutShape: pooled, Kernel: []int{poolSize, poolSize},
				Stride: []int{poolSize, poolSize}, Padding: []int{0, 0}})
			shape = pooled
		}
		fcs = []int{cnnFC1, cnnFC2}
	}
	in := 1
	for _, d := range shape {
		in *= d
	}
	if s.Kind == "cnn" || len(shape) > 1 {
		ls = append(ls, CardLayer{Op: "flatten", InShape: shape, OutShape: []int{in},
			Order: "row-major (C order) over the in_shape, as torch.flatten(x, 1)"})
	}
	sizes := append(append([]int{in}, fcs...), s.Classes)
	for l := 1; l < len(sizes); l++ {
		shape = []int{sizes[l-1]}
		ls = append(ls, CardLayer{Op: "linear", Name: fmt.Sprintf("fc%d", l), InShape: shape, OutShape: []int{sizes[l]},
			Weight: "[in_features, out_features]: y = x·W + b; torch's Linear.weight is its transpose"})
		shape = []int{sizes[l]}
		if l < len(sizes)-1 {
			act()
		}
	}
	return ls
}

// SpecFromCard is the Spec of c's model, with graph batch batch.
func SpecFromCard(c Card, batch int) (Spec, error) {
	s := Spec{Kind: c.Kind, InputShape: slices.Clone(c.InputShape), Hidden: slices.Clone(c.Hidden),
		Activation: c.Activation, Classes: c.Classes, Batch: batch}
	switch c.Dtype {
	case "float32":
		s.Dtype = tensor.Float32
	case "float64":
		s.Dtype = tensor.Float64
	default:
		return Spec{}, fmt.Errorf("%w: model card dtype %q: want float32 or float64", ErrBadSpec, c.Dtype)
	}
	if s.Kind == "cnn" {
		s.Hidden = nil
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("model card: %w", err)
	}
	return s, nil
}

// ParseCard decodes a card, refusing unknown fields, another format, and
// layers or parameters other than those its own fields give (Note [model
// cards]). Errors wrap ErrBadInit.
func ParseCard(b []byte) (Card, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Card
	if err := dec.Decode(&c); err != nil {
		return Card{}, fmt.Errorf("%w: model card: %w", ErrBadInit, err)
	}
	if c.Format != CardFormat {
		return Card{}, fmt.Errorf("%w: model card format %q; this program reads %q", ErrBadInit, c.Format, CardFormat)
	}
	s, err := SpecFromCard(c, 1)
	if err != nil {
		return Card{}, fmt.Errorf("%w: %w", ErrBadInit, err)
	}
	want := s.Card()
	want.InputFormat, want.InputScaling = c.InputFormat, c.InputScaling
	got, _ := json.Marshal(c)
	if w, _ := json.Marshal(want); !bytes.Equal(got, w) {
		return Card{}, fmt.Errorf("%w: model card: its layers or parameters are not those of the %s model its other "+
			"fields describe; it was not written by this program, or was edited", ErrBadInit, c.Kind)
	}
	return c, nil
}

// Marshal is c as the JSON file CardFile holds.
func (c Card) Marshal() []byte {
	b, _ := json.MarshalIndent(c, "", "  ") // plain types only: cannot fail
	return append(b, '\n')
}

// maxCard bounds a card file: a card lists a handful of layers.
const maxCard = 1 << 20

// ReadCard reads dir/CardFile; for a directory without one, the error
// wraps ErrNoCard (and fs.ErrNotExist). Other errors wrap ErrBadInit and
// name the file.
func ReadCard(dir string) (Card, error) {
	path := filepath.Join(dir, CardFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Card{}, fmt.Errorf("%w in %s: %w", ErrNoCard, dir, err)
	}
	if err == nil && (!fi.Mode().IsRegular() || fi.Size() > maxCard) {
		err = fmt.Errorf("not a regular file of at most %d bytes", maxCard)
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return Card{}, fmt.Errorf("%w: %s: %w", ErrBadInit, path, err)
	}
	c, err := ParseCard(b)
	if err != nil {
		return Card{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// CardField is one field of a card that a program's settings may also
// give: its JSON name and its value there, as a flag would spell it.
type CardField struct {
	Name, Value string
}

// Fields are c's fields that a run's flags may set, in a fixed order:
// kind, hidden (the mlp's), activation, classes, dtype.
func (c Card) Fields() []CardField {
	hidden := make([]string, len(c.Hidden))
	for i, h := range c.Hidden {
		hidden[i] = strconv.Itoa(h)
	}
	f := []CardField{{"kind", c.Kind}}
	if c.Kind == "mlp" {
		f = append(f, CardField{"hidden", strings.Join(hidden, ",")})
	}
	return append(f, CardField{"activation", c.Activation}, CardField{"classes", strconv.Itoa(c.Classes)},
		CardField{"dtype", c.Dtype})
}

// Check reports the first way s's model is not c's, naming the card's
// field, wrapping ErrBadInit; nil when c describes s (Batch aside). An
// mlp's input shapes agree when they hold as many values (it flattens
// them).
func (c Card) Check(s Spec) error {
	want := map[string]string{}
	for _, f := range c.Fields() {
		want[f.Name] = f.Value
	}
	for _, f := range s.Card().Fields() { // kind first: with another kind the other fields mean other things
		if w := want[f.Name]; w != f.Value {
			return fmt.Errorf("%w: the model card says %s %q, this model has %q", ErrBadInit, f.Name, w, f.Value)
		}
	}
	same := slices.Equal(c.InputShape, s.InputShape)
	if s.Kind == "mlp" {
		same = product1(c.InputShape) == s.Features()
	}
	if !same {
		return fmt.Errorf("%w: the model card says input_shape %v, this model's data has %v", ErrBadInit, c.InputShape,
			s.InputShape)
	}
	return nil
}

// product1 is the product of dims (a card's sizes are checked already).
func product1(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}
