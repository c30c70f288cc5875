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
	X []float64 // N×D features, row-major; nil when Pixels holds them
	// Pixels holds an IDX file's N×D pixels, row-major, when X is nil:
	// feature j of sample k is float64(Pixels[k*D+j]) / 255, one byte
	// each instead of X's eight (Note [compact samples]). Read either
	// with Gather or Row.
	Pixels  []byte
	Y       []int // N labels in [0, Classes)
	N, D    int
	Classes int
	Shape   []int // per-sample shape: [D] for tabular data, [1, rows, cols] for IDX images
}

// Note [compact samples]: an IDX file's pixels stay bytes, and become
// float64 (p / 255, the same value to the bit that LoadIDX has always
// given) only as a batch is gathered, so a process holds a data set of
// images at a byte a pixel, not nine (the file's bytes and their float64
// copy): MNIST's 47 MB of pixels cost 47 MB, not 423.

// Row copies sample k's D features into dst. Like Gather, it panics if k
// is out of range or dst is shorter than D.
func (d *Dataset) Row(k int, dst []float64) {
	dst = dst[:d.D]
	if d.X != nil {
		copy(dst, d.X[k*d.D:(k+1)*d.D])
		return
	}
	for j, p := range d.Pixels[k*d.D : (k+1)*d.D] {
		dst[j] = float64(p) / 255
	}
}

// Gather copies the samples at indices into x (len(indices)*D values, row
// after row) and their labels into y. Indices come from a sampler, so a bad
// one is a programming error: Gather panics if an index is out of range or
// x or y is too short.
func (d *Dataset) Gather(indices []int, x []float64, y []int) {
	if len(x) < len(indices)*d.D || len(y) < len(indices) {
		panic("dataset: Gather buffers shorter than the batch")
	}
	if d.X == nil {
		d.gatherPixels(indices, x)
	}
	for i, k := range indices {
		if d.X != nil {
			d.Row(k, x[i*d.D:(i+1)*d.D])
		}
		y[i] = d.Y[k]
	}
}

// gatherPixels is Gather's features from Pixels. It looks each value up in
// a table of the 256 quotients p / 255 that Row computes, which gives the
// same bits for a 256th of the divisions: a batch of 32 MNIST images
// divides 256 times instead of 25088.
func (d *Dataset) gatherPixels(indices []int, x []float64) {
	var scaled [256]float64
	for p := range scaled {
		scaled[p] = float64(p) / 255
	}
	for i, k := range indices {
		row := x[i*d.D : (i+1)*d.D]
		for j, p := range d.Pixels[k*d.D : (k+1)*d.D] {
			row[j] = scaled[p]
		}
	}
}

// Info is what a data set is, without its samples: what Inspect finds.
type Info struct {
	N, D    int
	Classes int
	Shape   []int
	// Bytes is what the samples take in memory once loaded: N·D·8 for
	// float64 features, N·D for IDX pixels.
	Bytes int64
}

// Info returns d's Info.
func (d *Dataset) Info() Info {
	b := int64(len(d.X)) * 8
	if d.X == nil {
		b = int64(len(d.Pixels))
	}
	return Info{N: d.N, D: d.D, Classes: d.Classes, Shape: d.Shape, Bytes: b}
}

// features are the samples read from a features file: x, or pixels
// (Note [compact samples]), or neither when they were only checked.
type features struct {
	x      []float64
	pixels []byte
	n      int
	shape  []int // per sample
}

// assemble checks that labels fit the features and the class count, and
// builds the Dataset.
func assemble(xPath, yPath string, f features, labels []int, classes int) (*Dataset, error) {
	if classes < 0 {
		return nil, inputErr("", "the number of classes is %d; it must be positive, or 0 to use the largest label plus one",
			classes)
	}
	if f.n == 0 {
		return nil, inputErr(xPath, "has no samples; a data set needs at least one")
	}
	if len(labels) != f.n {
		return nil, inputErr(yPath,
			"has %d labels but %s has %d samples; give exactly one label per sample, in the same order", len(labels), xPath, f.n)
	}
	maxLabel := 0
	for i, l := range labels {
		if l < 0 {
			return nil, inputErr(yPath, "label %d (index %d) is negative; labels must lie in [0, classes)", l, i)
		}
		maxLabel = max(maxLabel, l)
	}
	if classes == 0 {
		if err := checkLabelSpread(yPath, labels, maxLabel); err != nil {
			return nil, err
		}
		classes = maxLabel + 1
	}
	if maxLabel >= classes {
		i := indexOf(labels, maxLabel)
		return nil, inputErr(yPath, "label %d (index %d) is out of range for %d classes; labels must lie in [0, %d): give "+
			"more classes or fix the labels", maxLabel, i, classes, classes)
	}
	d := 1
	for _, s := range f.shape {
		d *= s
	}
	return &Dataset{X: f.x, Pixels: f.pixels, Y: labels, N: f.n, D: d, Classes: classes, Shape: f.shape}, nil
}

// Note [absurd labels]: without a class count, the largest label decides
// the model's output layer, so one stray label (1000000 among digits)
// would silently build a model of a million classes, gigabytes in every
// process. A largest label above absurdLabel and more than
// absurdSpread times the number of distinct labels is therefore refused,
// naming it; a caller that means it gives the class count.
const (
	absurdLabel  = 1000
	absurdSpread = 10
)

// checkLabelSpread refuses a largest label far beyond the labels seen
// (Note [absurd labels]). Distinct labels are counted in a bitset of
// maxLabel+1 bits, allocated only when maxLabel is at most absurdSpread
// times the number of labels (else it cannot pass): about a byte per label.
func checkLabelSpread(yPath string, labels []int, maxLabel int) error {
	if maxLabel <= absurdLabel {
		return nil
	}
	distinct, counted := len(labels), false // an upper bound until counted
	if maxLabel <= absurdSpread*len(labels) {
		seen := make([]uint64, maxLabel/64+1)
		distinct, counted = 0, true
		for _, l := range labels {
			if seen[l/64]&(1<<(l%64)) == 0 {
				seen[l/64] |= 1 << (l % 64)
				distinct++
			}
		}
	}
	if maxLabel <= absurdSpread*distinct {
		return nil
	}
	among := fmt.Sprintf("%d distinct labels", distinct)
	if !counted {
		among = fmt.Sprintf("%d labels", len(labels))
	}
	return inputErr(yPath, "label %d (index %d) is far beyond the others (%s): it would make a model of %d classes; fix "+
		"the label, or if there are that many classes give their number (ddp-train: --classes %d)",
		maxLabel, indexOf(labels, maxLabel), among, maxLabel+1, maxLabel+1)
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
