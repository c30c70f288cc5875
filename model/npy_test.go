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
	for _, spec := range []Spec{mlpSpec(tensor.Float32, 2, 5), mlpSpec(tensor.Float64, 2, 5, 6),
		cnnSpec(tensor.Float32, 1)} {
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
			t.Errorf("fc1.weight.npy: shape %v dtype %s, want %v %s", arr.Shape, arr.Descr, a.Shape(a.Index("fc1.weight")),
				wantDescr)
		}
	}
}

// Saving again writes and removes only the save's own files: a previous
// model's files are gone, the user's files in the directory stay, the
// directory itself is not replaced, and nothing is left beside it.
func TestSaveTouchesOnlyItsOwnFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "init")
	big, _ := NewParams(mlpSpec(tensor.Float64, 1, 2, 2), 1) // fc1..fc3
	if err := big.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(dir)
	for _, f := range []string{"stale.npy", "README", ".fc1.weight.npy.tmp-123"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := NewParams(mlpSpec(tensor.Float64, 1, 2), 1) // fc1, fc2
	if err := a.SaveNPY(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{SaveList, "README", "fc1.bias.npy", "fc1.weight.npy", "fc2.bias.npy", "fc2.weight.npy",
		"stale.npy"}; !slices.Equal(names, want) {
		t.Errorf("after a second save the directory holds %v, want %v", names, want)
	}
	if after, _ := os.Stat(dir); !os.SameFile(before, after) {
		t.Error("the directory itself was replaced")
	}
	if siblings, _ := os.ReadDir(root); len(siblings) != 1 {
		t.Errorf("the parent holds %d entries, want just the directory", len(siblings))
	}
	rec, err := readSaveList(dir)
	if err != nil || len(rec.Files) != 4 {
		t.Fatalf("the save's list: %+v, %v", rec, err)
	}
	for _, f := range rec.Files {
		b, _ := os.ReadFile(filepath.Join(dir, f.Name))
		if int64(len(b)) != f.Size || crcOf(b) != f.CRC32C {
			t.Errorf("%s: %d bytes %s, the list says %d %s", f.Name, len(b), crcOf(b), f.Size, f.CRC32C)
		}
	}
	if err := CheckSaveDir(dir, a.Names); err != nil {
		t.Errorf("CheckSaveDir after our own save: %v", err)
	}
}

// CheckSaveDir names a file the save would overwrite that no save wrote,
// a link where a file would go, and a list that is not ours.
func TestCheckSaveDirRefusesForeignFiles(t *testing.T) {
	names := ParamNames("mlp", 1)
	for what, plant := range map[string]func(dir string) (string, error){
		"a user's file": func(dir string) (string, error) {
			p := filepath.Join(dir, "fc1.weight.npy")
			return p, os.WriteFile(p, []byte("mine"), 0o644)
		},
		"a link": func(dir string) (string, error) {
			p := filepath.Join(dir, "fc2.bias.npy")
			return p, os.Symlink("/etc/passwd", p)
		},
		"a foreign list": func(dir string) (string, error) {
			p := filepath.Join(dir, SaveList)
			return p, os.WriteFile(p, []byte("{}"), 0o644)
		},
	} {
		dir := t.TempDir()
		path, err := plant(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSaveDir(dir, names); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: CheckSaveDir gave %v; want an error naming %s", what, err, path)
		}
	}
	if err := CheckSaveDir(filepath.Join(t.TempDir(), "none"), names); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}

// ParamNames are NewParams' names, without the data's sizes.
func TestParamNames(t *testing.T) {
	for _, spec := range []Spec{mlpSpec(tensor.Float64, 1), mlpSpec(tensor.Float64, 1, 3, 4), cnnSpec(tensor.Float64, 1)} {
		p, err := NewParams(spec, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := ParamNames(spec.Kind, len(spec.Hidden)); !slices.Equal(got, p.Names) {
			t.Errorf("%s %v: ParamNames %v, NewParams %v", spec.Kind, spec.Hidden, got, p.Names)
		}
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
