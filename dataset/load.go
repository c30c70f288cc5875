package dataset

import (
	"errors"
	"math"

	"github.com/goddp/ddp/npy"
)

// Load reads features from dataPath and labels from labelsPath, telling
// each file's format by its first bytes, not its name: .npy (see LoadNPY)
// or IDX (see LoadIDX), either possibly gzip-compressed. classes is the
// number of classes, or 0 for the largest label plus one. Every error
// matches ErrBadInput and names the file at fault.
func Load(dataPath, labelsPath string, classes int) (*Dataset, error) {
	return load(dataPath, labelsPath, classes, formatUnknown)
}

// LoadNPY reads features and labels from .npy files (gzip-compressed
// files are accepted too). The features have shape [N, D], or [N, ...] for
// samples that are themselves arrays, with any numeric dtype, and are used
// as they are; NaN and infinite values are rejected. The labels are
// integers of shape [N]. classes is the number of classes, or 0 for the
// largest label plus one; labels must lie in [0, classes). Every error
// matches ErrBadInput and names the file at fault.
func LoadNPY(xPath, yPath string, classes int) (*Dataset, error) {
	return load(xPath, yPath, classes, formatNPY)
}

// LoadIDX reads MNIST-style IDX files, plain or gzip-compressed: images in
// idx3-ubyte (magic 0x00000803, then N, rows, cols as big-endian uint32,
// then N*rows*cols pixels) and labels in idx1-ubyte (magic 0x00000801,
// then N, then N bytes). Pixels are scaled by 1/255 into [0, 1]; each
// sample has Shape [1, rows, cols]. classes is as for LoadNPY (10 for
// MNIST when 0). Every error matches ErrBadInput and names the file.
func LoadIDX(imagesPath, labelsPath string, classes int) (*Dataset, error) {
	return load(imagesPath, labelsPath, classes, formatIDX)
}

// load reads both files; want is the format both must have, or
// formatUnknown to accept either.
func load(xPath, yPath string, classes int, want format) (*Dataset, error) {
	if yPath == "" {
		return nil, inputErr(xPath, "has no labels file to go with it; give one")
	}
	f, err := readFeatures(xPath, want)
	if err != nil {
		return nil, err
	}
	labels, err := readLabels(yPath, want)
	if err != nil {
		return nil, err
	}
	return assemble(xPath, yPath, f, labels, classes)
}

// open opens path and checks that it has format want, if one is given.
func open(path string, want format) (*file, error) {
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	switch {
	case f.format == formatUnknown:
		err = f.unknownErr()
	case want == formatNPY && f.format != want:
		err = inputErr(path, "is not a .npy file (it does not start with \\x93NUMPY); save it with numpy.save")
	case want == formatIDX && f.format != want:
		err = inputErr(path, "is not an IDX file (it does not start with 0x0000080N); give MNIST's idx3-ubyte and idx1-ubyte files")
	}
	if err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

func readFeatures(path string, want format) (features, error) {
	f, err := open(path, want)
	if err != nil {
		return features{}, err
	}
	defer f.close()
	if f.format == formatIDX {
		return f.idxImages()
	}
	return f.npyFeatures()
}

func readLabels(path string, want format) ([]int, error) {
	f, err := open(path, want)
	if err != nil {
		return nil, err
	}
	defer f.close()
	if f.format == formatIDX {
		return f.idxLabels()
	}
	return f.npyLabels()
}

func (f *file) npyFeatures() (features, error) {
	a, err := f.readNPY()
	if err != nil {
		return features{}, err
	}
	if len(a.Shape) < 2 {
		return features{}, inputErr(f.path, "holds features of shape %v, but they need shape [N, D], one row per sample; for one feature per sample use X.reshape(-1, 1)", a.Shape)
	}
	x, err := a.Float64s()
	if err != nil {
		return features{}, f.npyErr(err)
	}
	d := (&npy.Array{Shape: a.Shape[1:]}).Len()
	if d == 0 {
		return features{}, inputErr(f.path, "holds features of shape %v: the samples have no features", a.Shape)
	}
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return features{}, inputErr(f.path, "sample %d has the value %v in feature %d; remove or replace NaN and infinite values", i/d, v, i%d)
		}
	}
	return features{x: x, n: a.Shape[0], shape: a.Shape[1:]}, nil
}

func (f *file) npyLabels() ([]int, error) {
	a, err := f.readNPY()
	if err != nil {
		return nil, err
	}
	if len(a.Shape) != 1 {
		return nil, inputErr(f.path, "holds labels of shape %v, but they need shape [N], one integer per sample; flatten them with y.reshape(-1)", a.Shape)
	}
	y, err := a.Ints()
	if err != nil {
		return nil, f.npyErr(err)
	}
	return y, nil
}

func (f *file) readNPY() (*npy.Array, error) {
	a, err := npy.Read(f.r)
	if err != nil {
		return nil, f.npyErr(err)
	}
	return a, nil
}

// npyErr rewraps an npy error to name the file and match ErrBadInput.
func (f *file) npyErr(err error) error {
	msg := err.Error()
	if fe, ok := errors.AsType[*npy.FormatError](err); ok {
		msg = fe.Msg
		if fe.Err != nil {
			msg += ": " + fe.Err.Error()
		}
	}
	return &InputError{Path: f.path, Msg: msg, Err: err}
}
