package model

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"

	"github.com/goddp/ddp/checkpoint/atomicdir"
	"github.com/goddp/ddp/npy"
	"gorgonia.org/tensor"
)

// SaveNPY writes every parameter to dir as <name>.npy, in the model's
// dtype and with its shape (an MLP weight is [in, out]). The directory is
// replaced as a whole: the files are written into a temporary directory
// beside dir, synced, and swapped in, so dir holds either its previous
// contents or every new file, never some of them.
func (p *Params) SaveNPY(dir string) error {
	err := atomicdir.Write(dir, func(tmp string) error {
		for i, name := range p.Names {
			path := filepath.Join(tmp, name+".npy")
			if err := npy.WriteFile(path, p.Shape(i), p.Nodes[i].Value().Data()); err != nil {
				return fmt.Errorf("writing %s: %w", name+".npy", err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("model: saving parameters to %s: %w", dir, err)
	}
	return nil
}

// LoadNPY sets every parameter from dir/<name>.npy, as SaveNPY writes
// them (or numpy's np.save, float32 or float64, in C order). Every file
// must exist and have exactly the parameter's shape, and every value must
// be finite. It reads and checks every file before it changes any
// parameter, so on error the model is as it was. Errors name the file
// and wrap ErrBadInit. Files for no parameter are ignored.
//
// Load before ddp.Wrap, or on every rank: Wrap broadcasts rank 0's
// values.
func (p *Params) LoadNPY(dir string) error {
	values := make([][]float64, len(p.Nodes))
	for i, name := range p.Names {
		v, err := p.readNPY(i, filepath.Join(dir, name+".npy"))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadInit, err)
		}
		values[i] = v
	}
	for i, v := range values {
		if err := p.SetValue(i, v); err != nil {
			return fmt.Errorf("%w: %w", ErrBadInit, err)
		}
	}
	return nil
}

// readNPY reads and checks the file for parameter i.
func (p *Params) readNPY(i int, path string) ([]float64, error) {
	want := p.Shape(i)
	a, err := npy.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file; the %s model needs one .npy file per parameter (%s), %s with shape %v",
			path, p.spec.Kind, p.describeFiles(), p.Names[i]+".npy", want)
	}
	if err != nil {
		return nil, err // npy's errors name the file
	}
	if !slices.Equal(a.Shape, want) {
		return nil, fmt.Errorf("%s: shape %v, but the model's %s has shape %v", path, a.Shape, p.Names[i], want)
	}
	v, err := a.Float64s()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) || p.spec.Dtype == tensor.Float32 && math.Abs(x) > math.MaxFloat32 {
			return nil, fmt.Errorf("%s: element %d is %v; initial values must be finite in %v", path, k, x, p.spec.Dtype)
		}
	}
	return v, nil
}

// describeFiles lists the expected files, abbreviated past a few.
func (p *Params) describeFiles() string {
	const show = 4
	s := ""
	for i, name := range p.Names {
		if i == show {
			return s + fmt.Sprintf(", … %d in all", len(p.Names))
		}
		if i > 0 {
			s += ", "
		}
		s += name + ".npy"
	}
	return s
}
