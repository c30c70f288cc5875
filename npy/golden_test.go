package npy

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// The bytes numpy.save writes, built by hand from the format
// specification: magic, version 1.0, a little-endian uint16 header length
// (118 = 0x76), the header dict padded with spaces so that the first 128
// bytes end in '\n', then the data.
var (
	// np.save(f, np.array([[0.5, 1, -2], [3, 0, 1.5]], dtype=np.float32))
	goldenF4 = "\x93NUMPY\x01\x00\x76\x00" +
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + strings.Repeat(" ", 58) + "\n" +
		"\x00\x00\x00\x3f" + "\x00\x00\x80\x3f" + "\x00\x00\x00\xc0" +
		"\x00\x00\x40\x40" + "\x00\x00\x00\x00" + "\x00\x00\xc0\x3f"
	// np.save(f, np.zeros((1,)*15)): numpy leaves room for the first
	// dimension to grow to 21 digits (GROWTH_AXIS_MAX_DIGITS), which here
	// pushes the header from 128 to 192 bytes (182 = 0xb6 after the prefix).
	goldenGrowth = "\x93NUMPY\x01\x00\xb6\x00" +
		"{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), }" +
		strings.Repeat(" ", 83) + "\n" + "\x00\x00\x00\x00\x00\x00\x00\x00"
	// np.save(f, np.array([1, -1, 256, 1 << 40], dtype=np.int64))
	goldenI8 = "\x93NUMPY\x01\x00\x76\x00" +
		"{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }" + strings.Repeat(" ", 60) + "\n" +
		"\x01\x00\x00\x00\x00\x00\x00\x00" + "\xff\xff\xff\xff\xff\xff\xff\xff" +
		"\x00\x01\x00\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x01\x00\x00"
)

func TestGoldenWrite(t *testing.T) {
	for _, c := range []struct {
		name   string
		shape  []int
		data   any
		golden string
	}{
		{"f4", []int{2, 3}, []float32{0.5, 1, -2, 3, 0, 1.5}, goldenF4},
		{"i8", []int{4}, []int64{1, -1, 256, 1 << 40}, goldenI8},
		{"growth", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []float64{0}, goldenGrowth},
	} {
		var b bytes.Buffer
		if err := Write(&b, c.shape, c.data); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := b.String(); got != c.golden {
			t.Errorf("%s: Write gave\n%q\nwant numpy's\n%q", c.name, got, c.golden)
		}
	}
}

func TestGoldenRead(t *testing.T) {
	a, err := Read(strings.NewReader(goldenF4))
	if err != nil {
		t.Fatal(err)
	}
	f, err := a.Float64s()
	if err != nil || a.Descr != "<f4" || !slices.Equal(a.Shape, []int{2, 3}) ||
		!slices.Equal(f, []float64{0.5, 1, -2, 3, 0, 1.5}) {
		t.Errorf("goldenF4: got %+v %v %v", a.Shape, f, err)
	}
	b, err := Read(strings.NewReader(goldenI8))
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.Ints()
	if err != nil || b.Descr != "<i8" || !slices.Equal(b.Shape, []int{4}) ||
		!slices.Equal(n, []int{1, -1, 256, 1 << 40}) {
		t.Errorf("goldenI8: got %+v %v %v", b.Shape, n, err)
	}
}

// withHeader builds a file with a version major.0 header around dict,
// aligned to 16 bytes like numpy before 1.9 did, followed by data.
func withHeader(major byte, dict, data string) string {
	lenBytes := 2
	if major > 1 {
		lenBytes = 4
	}
	hlen := len(dict) + 1
	hlen += (16 - (6+2+lenBytes+hlen)%16) % 16
	dict += strings.Repeat(" ", hlen-len(dict)-1) + "\n"
	out := magic + string([]byte{major, 0, byte(hlen), byte(hlen >> 8)})
	if lenBytes == 4 {
		out += "\x00\x00"
	}
	return out + dict + data
}

// Files other writers produce: older numpy, versions 2.0 and 3.0,
// Python 2's long integers, double quotes and other key orders.
func TestReadVariants(t *testing.T) {
	data := "\x01\x02\x03\x04\x05\x06"
	for _, c := range []struct {
		name, file string
		shape      []int
	}{
		{"numpy<1.9 16-byte alignment", withHeader(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", data),
			[]int{2, 3}},
		{"version 2.0", withHeader(2, "{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", data), []int{6}},
		{"version 3.0", withHeader(3, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }", data), []int{3, 2}},
		{"python 2 longs", withHeader(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2L, 3L), }", data), []int{2, 3}},
		{"double quotes, no trailing comma",
			withHeader(1, `{"shape": (1, 6,), "descr": "|u1", "fortran_order": False}`, data), []int{1, 6}},
		{"no padding or newline", magic + "\x01\x00\x37\x00{'descr': '|u1', 'fortran_order': False, 'shape': (6,)}" + data,
			[]int{6}},
		{"scalar", withHeader(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", data[:1]), []int{}},
		{"empty", withHeader(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }", ""), []int{0, 5}},
	} {
		a, err := Read(strings.NewReader(c.file))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(a.Shape, c.shape) || a.Len() != len(a.Data)/max(1, int(a.Descr[2]-'0')) {
			t.Errorf("%s: shape %v, %d bytes; want shape %v", c.name, a.Shape, len(a.Data), c.shape)
		}
	}
}
