package model

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/npy"
	"gorgonia.org/tensor"
)

// SaveNPY then LoadNPY into a model of another seed gives back every
// value bitwise, in both dtypes, for both kinds.
func TestSaveLoadRoundTrip(t *testing.T) {
	for _, spec := range []Spec{mlpSpec(tensor.Float32, 2, 5), mlpSpec(tensor.Float64, 2, 5, 6), cnnSpec(tensor.Float32, 1)} {
		dir := filepath.Join(t.TempDir(), "init")
		a, _ := NewParams(spec, 1)
		if err := a.SaveNPY(dir); err != nil {
			t.Fatal(err)
		}
		b, _ := NewParams(spec, 2)
		if slices.Equal(a.Value(0), b.Value(0)) {
			t.Fatal("two seeds gave the same first parameter")
		}
		if err := b.LoadNPY(dir); err != nil {
			t.Fatal(err)
		}
		for i := range a.Nodes {
			if !slices.Equal(a.Value(i), b.Value(i)) {
				t.Errorf("%v %s: %s changed in the round trip", spec.Dtype, spec.Kind, a.Names[i])
			}
		}
		arr, err := npy.ReadFile(filepath.Join(dir, "fc1.weight.npy"))
		if err != nil {
			t.Fatal(err)
		}
		wantDescr := map[tensor.Dtype]string{tensor.Float32: "<f4", tensor.Float64: "<f8"}[spec.Dtype]
		if !slices.Equal(arr.Shape, a.Shape(a.Index("fc1.weight"))) || arr.Descr != wantDescr {
			t.Errorf("fc1.weight.npy: shape %v dtype %s, want %v %s", arr.Shape, arr.Descr, a.Shape(a.Index("fc1.weight")), wantDescr)
		}
	}
}

// Saving again replaces the directory as a whole: a file the new save
// does not write is gone, and nothing is left beside it.
func TestSaveReplacesTheDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "init")
	a, _ := NewParams(mlpSpec(tensor.Float64, 1, 2), 1)
	if err := a.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stale.npy"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"fc1.bias.npy", "fc1.weight.npy", "fc2.bias.npy", "fc2.weight.npy"}; !slices.Equal(names, want) {
		t.Errorf("after a second save the directory holds %v, want %v", names, want)
	}
	if siblings, _ := os.ReadDir(root); len(siblings) != 1 {
		t.Errorf("the parent holds %d entries, want just the directory", len(siblings))
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	spec := mlpSpec(tensor.Float64, 1, 5) // fc1.weight [3,5]
	for _, c := range []struct {
		name  string
		edit  func(dir string) error
		wants []string
	}{
		{"wrong shape", func(dir string) error {
			return npy.WriteFile(filepath.Join(dir, "fc1.weight.npy"), []int{5, 3}, make([]float64, 15))
		}, []string{"fc1.weight.npy", "[5 3]", "[3 5]"}},
		{"missing file", func(dir string) error {
			return os.Remove(filepath.Join(dir, "fc2.bias.npy"))
		}, []string{"fc2.bias.npy", "no such file", "[4]"}},
		{"not finite", func(dir string) error {
			return npy.WriteFile(filepath.Join(dir, "fc1.bias.npy"), []int{5}, []float64{0, math.NaN(), 0, 0, 0})
		}, []string{"fc1.bias.npy", "NaN"}},
		{"not npy", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "fc2.weight.npy"), []byte("hello"), 0o644)
		}, []string{"fc2.weight.npy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src, _ := NewParams(spec, 1)
			if err := src.SaveNPY(dir); err != nil {
				t.Fatal(err)
			}
			if err := c.edit(dir); err != nil {
				t.Fatal(err)
			}
			p, _ := NewParams(spec, 2)
			before := p.Value(0)
			err := p.LoadNPY(dir)
			if !errors.Is(err, ErrBadInit) {
				t.Fatalf("LoadNPY: %v; want an error wrapping ErrBadInit", err)
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !slices.Equal(p.Value(0), before) {
				t.Error("a failed load changed fc1.weight")
			}
		})
	}
}

// A float64 file initialises a float32 model, rounded.
func TestLoadConvertsFloat64FilesForFloat32Models(t *testing.T) {
	dir := t.TempDir()
	src, _ := NewParams(mlpSpec(tensor.Float64, 1), 1)
	if err := src.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	p, _ := NewParams(mlpSpec(tensor.Float32, 1), 2)
	if err := p.LoadNPY(dir); err != nil {
		t.Fatal(err)
	}
	want, got := src.Value(0), p.Value(0)
	for k := range want {
		if got[k] != float64(float32(want[k])) {
			t.Fatalf("element %d: %v, want %v rounded to float32", k, got[k], want[k])
		}
	}
}
