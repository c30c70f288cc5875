package dataset

import (
	"errors"
	"fmt"
)

// ErrBadInput is matched (with errors.Is) by every error the loaders
// return: a missing or unreadable file, a file in the wrong format, or
// contents that fail validation. Programs exit with status 2 on it.
var ErrBadInput = errors.New("bad input")

// InputError is a problem with an input file. Path names the file (it is
// empty for a problem with an argument, such as a negative class count);
// Msg says what is wrong and what to do. It matches ErrBadInput.
type InputError struct {
	Path string
	Msg  string
	Err  error // the underlying error, if any (an *fs.PathError, an *npy.FormatError)
}

func (e *InputError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Is reports whether target is ErrBadInput.
func (e *InputError) Is(target error) bool { return target == ErrBadInput }

func (e *InputError) Unwrap() error { return e.Err }

func inputErr(path, format string, args ...any) error {
	return &InputError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Dataset is a classification data set held in memory.
type Dataset struct {
	X       []float64 // N×D features, row-major
	Y       []int     // N labels in [0, Classes)
	N, D    int
	Classes int
	Shape   []int // per-sample shape: [D] for tabular data, [1, rows, cols] for IDX images
}

// Gather copies the samples at indices into x (len(indices)*D values, row
// after row) and their labels into y. Indices come from a sampler, so a bad
// one is a programming error: Gather panics if an index is out of range or
// x or y is too short.
func (d *Dataset) Gather(indices []int, x []float64, y []int) {
	if len(x) < len(indices)*d.D || len(y) < len(indices) {
		panic("dataset: Gather buffers shorter than the batch")
	}
	for i, k := range indices {
		copy(x[i*d.D:(i+1)*d.D], d.X[k*d.D:(k+1)*d.D])
		y[i] = d.Y[k]
	}
}

// features are the samples read from a features file.
type features struct {
	x     []float64
	n     int
	shape []int // per sample
}

// assemble checks that labels fit the features and the class count, and
// builds the Dataset.
func assemble(xPath, yPath string, f features, labels []int, classes int) (*Dataset, error) {
	if classes < 0 {
		return nil, inputErr("", "the number of classes is %d; it must be positive, or 0 to use the largest label plus one", classes)
	}
	if f.n == 0 {
		return nil, inputErr(xPath, "has no samples; a data set needs at least one")
	}
	if len(labels) != f.n {
		return nil, inputErr(yPath, "has %d labels but %s has %d samples; give exactly one label per sample, in the same order", len(labels), xPath, f.n)
	}
	maxLabel := 0
	for i, l := range labels {
		if l < 0 {
			return nil, inputErr(yPath, "label %d (index %d) is negative; labels must lie in [0, classes)", l, i)
		}
		maxLabel = max(maxLabel, l)
	}
	if classes == 0 {
		classes = maxLabel + 1
	}
	if maxLabel >= classes {
		i := indexOf(labels, maxLabel)
		return nil, inputErr(yPath, "label %d (index %d) is out of range for %d classes; labels must lie in [0, %d): give more classes or fix the labels", maxLabel, i, classes, classes)
	}
	d := 1
	for _, s := range f.shape {
		d *= s
	}
	return &Dataset{X: f.x, Y: labels, N: f.n, D: d, Classes: classes, Shape: f.shape}, nil
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
