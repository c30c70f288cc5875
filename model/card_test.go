package model

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// A card round-trips through its file to the spec it came from, and its
// layers are the forward pass's: per-sample shapes that chain, LeNet's
// padding and pools, the flatten before the first linear layer, and the
// parameters NewParams makes.
func TestCardRoundTrip(t *testing.T) {
	for _, s := range []Spec{
		{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10, Dtype: tensor.Float64, Batch: 4},
		{Kind: "cnn", InputShape: []int{3, 13, 17}, Activation: "tanh", Classes: 3, Dtype: tensor.Float32, Batch: 1},
		{Kind: "mlp", InputShape: []int{32}, Hidden: []int{7, 5}, Activation: "tanh", Classes: 4, Dtype: tensor.Float32,
			Batch: 2},
		{Kind: "mlp", InputShape: []int{1, 4, 4}, Activation: "relu", Classes: 2, Dtype: tensor.Float64, Batch: 2},
	} {
		card := s.Card()
		card.InputFormat, card.InputScaling = "idx", "x/255"
		got, err := ParseCard(card.Marshal())
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		back, err := SpecFromCard(got, s.Batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Check(s); err != nil || !slices.Equal(back.InputShape, s.InputShape) || back.Kind != s.Kind ||
			back.Dtype != s.Dtype || back.Classes != s.Classes || back.Activation != s.Activation ||
			!slices.Equal(back.Hidden, s.Hidden) && len(s.Hidden) > 0 {
			t.Errorf("%+v: came back as %+v (%v)", s, back, err)
		}
		shape := s.InputShape
		for i, l := range card.Layers {
			if !slices.Equal(l.InShape, shape) {
				t.Errorf("%s layer %d (%s) takes %v after %v", s.Kind, i, l.Op, l.InShape, shape)
			}
			shape = l.OutShape
		}
		if !slices.Equal(shape, []int{s.Classes}) {
			t.Errorf("%s: the last layer gives %v, want [%d]", s.Kind, shape, s.Classes)
		}
		p, _ := NewParams(s, 1)
		for i, cp := range card.Parameters {
			if cp.Name != p.Names[i] || !slices.Equal(cp.Shape, p.Shape(i)) {
				t.Errorf("card parameter %d %s %v, NewParams' %s %v", i, cp.Name, cp.Shape, p.Names[i], p.Shape(i))
			}
		}
	}
	lenet := Spec{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10, Dtype: tensor.Float32,
		Batch: 1}.Card()
	var ops []string
	for _, l := range lenet.Layers {
		ops = append(ops, l.Op)
	}
	want := "conv2d relu maxpool2d conv2d relu maxpool2d flatten linear relu linear relu linear"
	if strings.Join(ops, " ") != want || !slices.Equal(lenet.Layers[0].Padding, []int{2, 2}) ||
		!slices.Equal(lenet.Layers[6].InShape, []int{16, 5, 5}) || !slices.Equal(lenet.Layers[2].OutShape, []int{6, 14, 14}) {
		t.Errorf("LeNet's card: %s, padding %v, flatten %v", strings.Join(ops, " "), lenet.Layers[0].Padding,
			lenet.Layers[6].InShape)
	}
}

// ParseCard refuses a card whose layers are not those its fields give,
// unknown fields and another format; Check names the field that differs.
func TestCardRefusals(t *testing.T) {
	s := Spec{Kind: "mlp", InputShape: []int{8}, Hidden: []int{3}, Activation: "relu", Classes: 2, Dtype: tensor.Float32,
		Batch: 1}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(s.Card().Marshal(), &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, b := range map[string][]byte{
		"hidden changed, layers not": edit(func(m map[string]any) { m["hidden"] = []int{4} }),
		"unknown field":              edit(func(m map[string]any) { m["bias"] = true }),
		"format":                     edit(func(m map[string]any) { m["format"] = "other/1" }),
		"dtype":                      edit(func(m map[string]any) { m["dtype"] = "int8" }),
		"not json":                   []byte("{"),
	} {
		if _, err := ParseCard(b); !errors.Is(err, ErrBadInit) {
			t.Errorf("%s: ParseCard gave %v, want ErrBadInit", name, err)
		}
	}
	card := s.Card()
	cnn := Spec{Kind: "cnn", InputShape: []int{1, 12, 12}, Activation: "relu", Classes: 2, Dtype: tensor.Float32, Batch: 1}
	for field, change := range map[string]func(o *Spec){
		"kind":        func(o *Spec) { *o = cnn },
		"hidden":      func(o *Spec) { o.Hidden = []int{4} },
		"activation":  func(o *Spec) { o.Activation = "tanh" },
		"classes":     func(o *Spec) { o.Classes = 3 },
		"dtype":       func(o *Spec) { o.Dtype = tensor.Float64 },
		"input_shape": func(o *Spec) { o.InputShape = []int{9} },
	} {
		other := s
		change(&other)
		if err := card.Check(other); !errors.Is(err, ErrBadInit) || !strings.Contains(err.Error(), field) {
			t.Errorf("Check against another %s: %v", field, err)
		}
	}
	flat := s
	flat.InputShape = []int{2, 2, 2} // an mlp flattens: the same 8 features
	if err := card.Check(flat); err != nil {
		t.Errorf("an mlp's [2,2,2] against its card's [8]: %v", err)
	}
}

// SaveNPYCard writes the card and lists it; SaveNPY then removes it;
// CheckSaveDir refuses a card no save wrote; ReadCard of a directory
// without one wraps ErrNoCard.
func TestSaveNPYCard(t *testing.T) {
	dir := t.TempDir()
	s := Spec{Kind: "mlp", InputShape: []int{3}, Activation: "relu", Classes: 2, Dtype: tensor.Float64, Batch: 1}
	p, _ := NewParams(s, 1)
	if _, err := ReadCard(dir); !errors.Is(err, ErrNoCard) {
		t.Fatalf("ReadCard of an empty directory: %v", err)
	}
	if err := p.SaveNPYCard(dir, s.Card()); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadCard(dir); err != nil || c.Check(s) != nil {
		t.Fatalf("ReadCard: %+v, %v", c, err)
	}
	rec, _ := readSaveList(dir)
	if !slices.ContainsFunc(rec.Files, func(f savedFile) bool { return f.Name == CardFile }) {
		t.Errorf("%s does not list %s: %+v", SaveList, CardFile, rec)
	}
	if err := CheckSaveDir(dir, ParamNames("mlp", 0)); err != nil {
		t.Errorf("CheckSaveDir after a save with a card: %v", err)
	}
	wrong := s
	wrong.Classes = 3
	if err := p.SaveNPYCard(dir, wrong.Card()); err == nil {
		t.Error("SaveNPYCard saved a card of another model")
	}
	if err := p.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CardFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a save without a card left the previous save's card: %v", err)
	}
	os.WriteFile(filepath.Join(dir, CardFile), []byte("someone else's"), 0o644)
	if err := CheckSaveDir(dir, ParamNames("mlp", 0)); err == nil || !strings.Contains(err.Error(), CardFile) {
		t.Errorf("CheckSaveDir with a card no save wrote: %v", err)
	}
	if _, err := ReadCard(dir); !errors.Is(err, ErrBadInit) {
		t.Errorf("ReadCard of a damaged card: %v", err)
	}
}
