package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/npy"
)

// put writes a file into dir and returns its path.
func put(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// npyBytes encodes an array as numpy.save would.
func npyBytes(t *testing.T, shape []int, data any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := npy.Write(&b, shape, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// idx encodes an IDX file of unsigned bytes.
func idx(dims []uint32, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestLoadNPY(t *testing.T) {
	dir := t.TempDir()
	y := put(t, dir, "y.npy", npyBytes(t, []int{3}, []int32{1, 0, 1}))
	for _, c := range []struct {
		name  string
		shape []int
		data  any
	}{
		{"f4.npy", []int{3, 2}, []float32{0.5, 1, 2, 3, 4, 5}},
		{"f8.npy", []int{3, 2}, []float64{0.5, 1, 2, 3, 4, 5}},
		{"nd.npy", []int{3, 1, 2}, []float64{0.5, 1, 2, 3, 4, 5}},
	} {
		x := put(t, dir, c.name, npyBytes(t, c.shape, c.data))
		for _, load := range []func(string, string, int) (*Dataset, error){Load, LoadNPY} {
			ds, err := load(x, y, 0)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if ds.N != 3 || ds.D != 2 || ds.Classes != 2 || !slices.Equal(ds.Shape, c.shape[1:]) ||
				!slices.Equal(ds.X, []float64{0.5, 1, 2, 3, 4, 5}) || !slices.Equal(ds.Y, []int{1, 0, 1}) {
				t.Errorf("%s: got %+v", c.name, ds)
			}
		}
	}
	// Integer features are accepted; a larger class count is kept; gzip works.
	xi := put(t, dir, "xi.npy.gz", gz(t, npyBytes(t, []int{3, 1}, []int64{-1, 0, 7})))
	ds, err := LoadNPY(xi, y, 5)
	if err != nil || ds.Classes != 5 || !slices.Equal(ds.X, []float64{-1, 0, 7}) {
		t.Errorf("int features, 5 classes: %+v, %v", ds, err)
	}
}

// A hand-written MNIST-style pair of IDX files: 3 images of 2×2 pixels.
func TestLoadIDX(t *testing.T) {
	dir := t.TempDir()
	pixels := []byte{0, 255, 51, 102, 1, 2, 3, 4, 255, 255, 0, 0}
	images := idx([]uint32{3, 2, 2}, pixels)
	labels := idx([]uint32{3}, []byte{7, 0, 9})
	want := make([]float64, len(pixels))
	for i, p := range pixels {
		want[i] = float64(p) / 255
	}
	for _, c := range []struct{ name, x, y string }{
		{"plain", put(t, dir, "train-images-idx3-ubyte", images), put(t, dir, "train-labels-idx1-ubyte", labels)},
		{"gzip", put(t, dir, "i.gz", gz(t, images)), put(t, dir, "l.gz", gz(t, labels))},
	} {
		for _, load := range []func(string, string, int) (*Dataset, error){Load, LoadIDX} {
			ds, err := load(c.x, c.y, 0)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			x, y := make([]float64, len(want)), make([]int, 3)
			ds.Gather([]int{0, 1, 2}, x, y)
			if ds.N != 3 || ds.D != 4 || ds.Classes != 10 || !slices.Equal(ds.Shape, []int{1, 2, 2}) ||
				!slices.Equal(x, want) || !slices.Equal(y, []int{7, 0, 9}) || ds.X != nil || !bytes.Equal(ds.Pixels, pixels) {
				t.Errorf("%s: got %+v", c.name, ds)
			}
			info, err := Inspect(c.x, c.y, 0)
			if err != nil || !reflect.DeepEqual(info, ds.Info()) || info.Bytes != int64(len(pixels)) {
				t.Errorf("%s: Inspect gives %+v, %v; Load %+v", c.name, info, err, ds.Info())
			}
		}
	}
	// Load mixes formats: IDX images with .npy labels.
	ds, err := Load(filepath.Join(dir, "train-images-idx3-ubyte"),
		put(t, dir, "y.npy", npyBytes(t, []int{3}, []int64{1, 2, 3})), 0)
	if err != nil || ds.Classes != 4 || ds.D != 4 {
		t.Errorf("IDX images with .npy labels: %+v, %v", ds, err)
	}
}

func TestGather(t *testing.T) {
	ds := &Dataset{X: []float64{0, 1, 10, 11, 20, 21}, Y: []int{0, 1, 2}, N: 3, D: 2}
	x, y := make([]float64, 6), make([]int, 3)
	ds.Gather([]int{2, 0, 2}, x, y)
	if !slices.Equal(x, []float64{20, 21, 0, 1, 20, 21}) || !slices.Equal(y, []int{2, 0, 2}) {
		t.Errorf("Gather: x %v, y %v", x, y)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "shorter than the batch") {
			t.Errorf("Gather with a short buffer: recovered %v, want a panic naming the problem", r)
		}
	}()
	ds.Gather([]int{0, 1}, x[:3], y)
}

func TestFloatSpecialsRejected(t *testing.T) {
	dir := t.TempDir()
	x := put(t, dir, "x.npy", npyBytes(t, []int{2, 2}, []float64{0, 1, math.NaN(), 2}))
	y := put(t, dir, "y.npy", npyBytes(t, []int{2}, []int64{0, 1}))
	_, err := Load(x, y, 0)
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "sample 1 has the value NaN in feature 0") {
		t.Errorf("NaN feature: %v", err)
	}
}

// Note [absurd labels]: a largest label within 10 times the distinct
// labels, or at most 1000, is taken as the class count; a stray one is
// accepted when the class count is given.
func TestLabelSpread(t *testing.T) {
	dir := t.TempDir()
	const n = 2000
	wide := make([]int64, n) // 0, 10, 20, ...: 2000 distinct labels up to 19990
	for i := range wide {
		wide[i] = int64(10 * i)
	}
	x := put(t, dir, "x.npy", npyBytes(t, []int{n, 1}, make([]float32, n)))
	y := put(t, dir, "y.npy", npyBytes(t, []int{n}, wide))
	if ds, err := Load(x, y, 0); err != nil || ds.Classes != 10*(n-1)+1 {
		t.Errorf("labels up to 10x their distinct count: %v", err)
	}
	stray := make([]int64, n)
	stray[5] = 1000000
	ys := put(t, dir, "ys.npy", npyBytes(t, []int{n}, stray))
	if ds, err := Load(x, ys, 1000001); err != nil || ds.Classes != 1000001 {
		t.Errorf("a stray label with the class count given: %v", err)
	}
	if _, err := Load(x, ys, 0); err == nil || !strings.Contains(err.Error(), "label 1000000 (index 5) is far beyond") {
		t.Errorf("a stray label: %v", err)
	}
	few := slices.Repeat([]int64{0, 1500}, n/2) // counted: 2 distinct labels
	if _, err := Load(x, put(t, dir, "y1500.npy", npyBytes(t, []int{n}, few)), 0); err == nil ||
		!strings.Contains(err.Error(),
			"label 1500 (index 1) is far beyond the others (2 distinct labels): it would make a model of 1501 classes") {
		t.Errorf("largest label 1500 of 2 distinct: %v", err)
	}
	small := slices.Repeat([]int64{0, 1000}, n/2) // the largest label at the threshold
	if _, err := Load(x, put(t, dir, "y1000.npy", npyBytes(t, []int{n}, small)), 0); err != nil {
		t.Errorf("largest label 1000: %v", err)
	}
}

// Note [inspect, then load]: Inspect checks a gzip IDX file that inflates
// to 16 MB in constant memory, and finds what Load finds wrong.
func TestInspectStreams(t *testing.T) {
	dir := t.TempDir()
	const n = 20000 // 28×28 zero images: 15.7 MB, about 16 KB gzipped
	images := put(t, dir, "images.gz", gz(t, idx([]uint32{n, 28, 28}, make([]byte, n*28*28))))
	digits := make([]byte, n)
	for i := range digits {
		digits[i] = byte(i % 10)
	}
	labels := put(t, dir, "labels.gz", gz(t, idx([]uint32{n}, digits)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	info, err := Inspect(images, labels, 0)
	runtime.ReadMemStats(&after)
	if err != nil || info.N != n || info.D != 784 || info.Classes != 10 || info.Bytes != n*784 {
		t.Fatalf("got %+v, %v", info, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > n*784/8 {
		t.Errorf("Inspect allocated %d bytes for %d bytes of pixels; want constant memory (labels aside)", alloc, n*784)
	}
	short := put(t, dir, "short.gz", gz(t, idx([]uint32{n, 28, 28}, make([]byte, n*28*28-1))))
	if _, err := Inspect(short, labels, 0); err == nil || !strings.Contains(err.Error(), "is truncated") {
		t.Errorf("a truncated file: %v", err)
	}
	long := put(t, dir, "long.gz", gz(t, idx([]uint32{n, 28, 28}, make([]byte, n*28*28+1))))
	if _, err := Inspect(long, labels, 0); err == nil || !strings.Contains(err.Error(), "bytes after") {
		t.Errorf("trailing bytes: %v", err)
	}
	x := put(t, dir, "x.npy", npyBytes(t, []int{2, 2}, []float64{0, 1, math.NaN(), 3}))
	y := put(t, dir, "y.npy", npyBytes(t, []int{2}, []int64{0, 1}))
	if _, err := Inspect(x, y, 0); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("a NaN: %v", err)
	}
	if info, err := Inspect(put(t, dir, "x2.npy", npyBytes(t, []int{2, 2}, []float32{0, 1, 2, 3})), y, 0); err != nil ||
		info.Bytes != 32 || info.D != 2 {
		t.Errorf(".npy: %+v, %v", info, err)
	}
}
