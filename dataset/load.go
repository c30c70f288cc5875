package dataset

import (
	"errors"
	"math"

	"github.com/goddp/ddp/npy"
)

// Load reads features from dataPath and labels from labelsPath, telling
// each file's format by its first bytes, not its name: .npy (see LoadNPY)
// or IDX (see LoadIDX), either possibly gzip-compressed. classes is the
// number of classes, or 0 for the largest label plus one (refused when
// that label is far beyond the others: Note [absurd labels]). Every error
// matches ErrBadInput and names the file at fault.
func Load(dataPath, labelsPath string, classes int) (*Dataset, error) {
	return load(dataPath, labelsPath, classes, formatUnknown, false)
}

// LoadNPY reads features and labels from .npy files (gzip-compressed
// files are accepted too). The features have shape [N, D], or [N, ...] for
// samples that are themselves arrays, with any numeric dtype, and are used
// as they are; NaN and infinite values are rejected. The labels are
// integers of shape [N]. classes is the number of classes, or 0 for the
// largest label plus one (Note [absurd labels]); labels must lie in
// [0, classes). Every error
// matches ErrBadInput and names the file at fault.
func LoadNPY(xPath, yPath string, classes int) (*Dataset, error) {
	return load(xPath, yPath, classes, formatNPY, false)
}

// LoadIDX reads MNIST-style IDX files, plain or gzip-compressed: images in
// idx3-ubyte (magic 0x00000803, then N, rows, cols as big-endian uint32,
// then N*rows*cols pixels) and labels in idx1-ubyte (magic 0x00000801,
// then N, then N bytes). Pixels are scaled by 1/255 into [0, 1]; each
// sample has Shape [1, rows, cols]. classes is as for LoadNPY (10 for
// MNIST when 0). Every error matches ErrBadInput and names the file.
func LoadIDX(imagesPath, labelsPath string, classes int) (*Dataset, error) {
	return load(imagesPath, labelsPath, classes, formatIDX, false)
}

// Inspect checks the files as Load does, every check included, and
// returns what Load would load without holding it: IDX pixels are read
// and dropped as they arrive, in constant memory; .npy features are read
// whole, checked and dropped (Note [inspect, then load]).
func Inspect(dataPath, labelsPath string, classes int) (Info, error) {
	ds, err := load(dataPath, labelsPath, classes, formatUnknown, true)
	if err != nil {
		return Info{}, err
	}
	info := ds.Info()
	info.Bytes = int64(ds.N) * int64(ds.D) * 8
	if f, err := openFile(dataPath); err == nil { // read and checked already
		if f.format == formatIDX {
			info.Bytes = int64(ds.N) * int64(ds.D) // Note [compact samples]
		}
		f.close()
	}
	return info, nil
}

// Note [inspect, then load]: a launcher checks the input once, before it
// starts any worker, so that bad input is one line and exit 2, not a
// failure in every worker; but it need not hold the data, which only the
// workers train on. Inspect streams an IDX file's pixels (a gzip stream
// that inflates 1000-fold costs the launcher nothing); a .npy file is
// decoded in one piece, as Load does, checked for NaN and infinities and
// dropped, so the launcher's peak is the loading's, and it is freed
// before the workers start.

// MaxValues is the most feature values, and the most labels, a data set
// may hold: 2³¹−1, as many as an IDX file's pixels. In memory that is up
// to 16 GiB of float64 features (plus, while a file is read, its raw
// data). A header that declares more is refused before anything is read:
// it is corrupt, or the data set is too large for one process to hold.
const MaxValues = math.MaxInt32

// load reads both files; want is the format both must have, or
// formatUnknown to accept either. Note [headers first]: both files'
// headers are read, and the sizes they declare checked against each
// other and against MaxValues, before the data of either is read, so a
// file that declares more than it holds (a small gzip stream that claims
// gigabytes) or more than its partner fails at once.
func load(xPath, yPath string, classes int, want format, check bool) (*Dataset, error) {
	if yPath == "" {
		return nil, inputErr(xPath, "has no labels file to go with it; give one")
	}
	xf, err := open(xPath, want)
	if err != nil {
		return nil, err
	}
	defer xf.close()
	xh, err := xf.featuresHeader()
	if err != nil {
		return nil, err
	}
	yf, err := open(yPath, want)
	if err != nil {
		return nil, err
	}
	defer yf.close()
	yh, err := yf.labelsHeader()
	if err != nil {
		return nil, err
	}
	if yh.n != xh.n {
		return nil, inputErr(yPath,
			"has %d labels but %s has %d samples; give exactly one label per sample, in the same order", yh.n, xPath, xh.n)
	}
	f, err := xf.readFeatures(xh, check)
	if err != nil {
		return nil, err
	}
	labels, err := yf.readLabels(yh)
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
		err = inputErr(path,
			"is not an IDX file (it does not start with 0x0000080N); give MNIST's idx3-ubyte and idx1-ubyte files")
	}
	if err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// declared is what a file's header says it holds: n samples (of shape,
// for features) or n labels, and for .npy the header to read the data
// with.
type declared struct {
	n     int
	shape []int // per sample; features only
	npy   npy.Header
}

// featuresHeader reads and checks the features file's header.
func (f *file) featuresHeader() (declared, error) {
	if f.format == formatIDX {
		return f.idxImagesHeader()
	}
	h, err := npy.ReadHeader(f.r)
	if err != nil {
		return declared{}, f.npyErr(err)
	}
	if len(h.Shape) < 2 {
		return declared{}, inputErr(f.path, "holds features of shape %v, but they need shape [N, D], one row per sample; "+
			"for one feature per sample use X.reshape(-1, 1)", h.Shape)
	}
	n, d := h.Shape[0], (npy.Header{Shape: h.Shape[1:]}).Len()
	switch {
	case d == 0:
		return declared{}, inputErr(f.path, "holds features of shape %v: the samples have no features", h.Shape)
	case n == 0:
		return declared{}, inputErr(f.path, "has no samples; a data set needs at least one")
	case d < 0 || n > MaxValues/d:
		return declared{}, inputErr(f.path, "declares features of shape %v, more than the %d values a data set may hold; "+
			"the file is corrupt, or too large to load at once", h.Shape, MaxValues)
	}
	return declared{n: n, shape: h.Shape[1:], npy: h}, nil
}

// labelsHeader reads and checks the labels file's header.
func (f *file) labelsHeader() (declared, error) {
	if f.format == formatIDX {
		return f.idxLabelsHeader()
	}
	h, err := npy.ReadHeader(f.r)
	if err != nil {
		return declared{}, f.npyErr(err)
	}
	if len(h.Shape) != 1 {
		return declared{}, inputErr(f.path,
			"holds labels of shape %v, but they need shape [N], one integer per sample; flatten them with y.reshape(-1)",
			h.Shape)
	}
	return declared{n: h.Shape[0], npy: h}, nil // load checks n against the features
}

// readFeatures reads the data of the features h describes; with check,
// it checks them and drops them.
func (f *file) readFeatures(h declared, check bool) (features, error) {
	if f.format == formatIDX {
		return f.idxImages(h, check)
	}
	a, err := npy.ReadData(f.r, h.npy)
	if err != nil {
		return features{}, f.npyErr(err)
	}
	x, err := a.Float64s()
	if err != nil {
		return features{}, f.npyErr(err)
	}
	d := len(x) / h.n
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return features{}, inputErr(f.path,
				"sample %d has the value %v in feature %d; remove or replace NaN and infinite values", i/d, v, i%d)
		}
	}
	if check {
		x = nil
	}
	return features{x: x, n: h.n, shape: h.shape}, nil
}

// readLabels reads the labels h describes.
func (f *file) readLabels(h declared) ([]int, error) {
	if f.format == formatIDX {
		return f.idxLabels(h)
	}
	a, err := npy.ReadData(f.r, h.npy)
	if err != nil {
		return nil, f.npyErr(err)
	}
	y, err := a.Ints()
	if err != nil {
		return nil, f.npyErr(err)
	}
	return y, nil
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
