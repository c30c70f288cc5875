package dataset

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Every bad input gives an error that matches ErrBadInput, names the file
// at fault and says what is wrong.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	f := func(name string, b []byte) string { return put(t, dir, name, b) }
	x := f("x.npy", npyBytes(t, []int{3, 2}, []float32{0, 1, 2, 3, 4, 5}))
	y := f("y.npy", npyBytes(t, []int{3}, []int64{0, 1, 2}))
	images := f("images", idx([]uint32{2, 2, 2}, make([]byte, 8)))
	labels := f("labels", idx([]uint32{2}, []byte{1, 3}))
	missing := filepath.Join(dir, "missing.npy")
	corruptGz := gz(t, npyBytes(t, []int{3}, []int64{0, 1, 2}))
	corruptGz[len(corruptGz)-8] ^= 0xff // the CRC-32

	for _, c := range []struct {
		name      string
		load      func(string, string, int) (*Dataset, error)
		x, y      string
		classes   int
		blame     string // the file the message must name
		want      string
		notExists bool
	}{
		{"missing features", Load, missing, y, 0, missing, "cannot open: no such file", true},
		{"missing labels", Load, x, missing, 0, missing, "cannot open", true},
		{"directory", Load, dir, y, 0, dir, "cannot read: is a directory", false},
		{"no labels path", Load, x, "", 0, x, "no labels file", false},
		{"features shape [N]", Load, f("x1.npy", npyBytes(t, []int{3}, []float32{0, 1, 2})), y, 0, "x1.npy",
			"need shape [N, D]", false},
		{"features no columns", Load, f("x0.npy", npyBytes(t, []int{3, 0}, []float32{})), y, 0, "x0.npy", "have no features",
			false},
		{"no samples", Load, f("xe.npy", npyBytes(t, []int{0, 2}, []float32{})),
			f("ye.npy", npyBytes(t, []int{0}, []int64{})), 0, "xe.npy", "no samples", false},
		{"labels float", Load, x, f("yf.npy", npyBytes(t, []int{3}, []float64{0, 1, 2})), 0, "yf.npy",
			"labels must be integers", false},
		{"labels shape [N,1]", Load, x, f("y2.npy", npyBytes(t, []int{3, 1}, []int64{0, 1, 2})), 0, "y2.npy",
			"need shape [N]", false},
		{"labels out of range", Load, x, y, 2, y, "label 2 (index 2) is out of range for 2 classes", false},
		{"labels negative", Load, x, f("yn.npy", npyBytes(t, []int{3}, []int32{0, -1, 2})), 0, "yn.npy",
			"label -1 (index 1) is negative", false},
		{"negative classes", Load, x, y, -1, "", "number of classes is -1", false},
		{"counts differ", Load, x, f("y4.npy", npyBytes(t, []int{4}, []int64{0, 1, 2, 0})), 0, "y4.npy",
			"has 4 labels but " + x + " has 3 samples", false},
		{"npy truncated", Load, f("xt.npy", npyBytes(t, []int{3, 2}, []float32{0, 1, 2, 3, 4, 5})[:140]), y, 0, "xt.npy",
			"data is truncated", false},
		{"gzip checksum", Load, x, f("yc.npy.gz", corruptGz), 0, "yc.npy.gz", "checksum", false},
		{"gzip header", Load, x, f("yh.gz", []byte("\x1f\x8b\x00junk")), 0, "yh.gz", "not a valid gzip file", false},
		{"wrong magic", Load, f("x.csv", []byte("1,2,3\n4,5,6\n")), y, 0, "x.csv", "neither a .npy file", false},
		{"empty file", Load, f("empty", nil), y, 0, "empty", "neither a .npy file", false},
		{"IDX truncated pixels", Load, f("it", idx([]uint32{2, 2, 2}, make([]byte, 7))), labels, 0, "it",
			"truncated: the header promises 8 bytes of pixels but only 7", false},
		{"IDX truncated gzip", Load, f("itg", gz(t, idx([]uint32{2, 2, 2}, make([]byte, 7)))), labels, 0, "itg", "truncated",
			false},
		{"IDX truncated labels", Load, images, f("lt", idx([]uint32{2}, []byte{1})), 0, "lt", "truncated", false},
		{"IDX truncated header", Load, f("ih", []byte{0, 0, 8, 3, 0, 0}), labels, 0, "ih", "truncated inside its IDX header",
			false},
		{"IDX trailing bytes", Load, images, f("lx", idx([]uint32{2}, []byte{1, 2, 3})), 0, "lx", "bytes after", false},
		{"IDX element type", Load, f("if", []byte{0, 0, 0x0d, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}), labels, 0,
			"if", "element type 0x0d", false},
		{"IDX swapped", Load, labels, images, 0, labels, "did you swap", false},
		{"IDX no pixels", Load, f("i0", idx([]uint32{2, 0, 2}, nil)), labels, 0, "i0", "0×2 pixels", false},
		{"IDX too large", Load, f("ib", idx([]uint32{0xffffffff, 0xffffffff, 0xffffffff}, nil)), labels, 0, "ib",
			"more than the", false},
		{"IDX counts differ", Load, images, f("l3", idx([]uint32{3}, []byte{1, 2, 3})), 0, "l3", "has 3 labels but", false},
		{"stray label", Load, x, f("ys.npy", npyBytes(t, []int{3}, []int64{0, 1000000, 2})), 0, "ys.npy", "label 1000000 " +
			"(index 1) is far beyond the others (3 labels): it would make a model of 1000001 classes; fix the label, or if " +
			"there are that many classes give their number (ddp-train: --classes 1000001)", false},
		{"stray label, too few to count", Load, x, f("yb.npy", npyBytes(t, []int{3}, []int64{0, 1 << 40, 2})), 0, "yb.npy",
			"(3 labels)", false},
		{"LoadNPY of IDX", LoadNPY, images, y, 0, images, "is not a .npy file", false},
		{"LoadIDX of npy", LoadIDX, images, y, 0, y, "is not an IDX file", false},
	} {
		_, err := c.load(c.x, c.y, c.classes)
		t.Logf("%s: %v", c.name, err)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: %v does not match ErrBadInput", c.name, err)
		}
		var ie *InputError
		if !errors.As(err, &ie) || !strings.HasSuffix(ie.Path, c.blame) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, want an *InputError naming %q and containing %q", c.name, err, c.blame, c.want)
		}
		if c.notExists != errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: errors.Is(%v, fs.ErrNotExist) = %v", c.name, err, !c.notExists)
		}
	}
}
