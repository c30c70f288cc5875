package npy

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// roundTrip writes data and reads it back.
func roundTrip(t *testing.T, shape []int, data any) *Array {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, shape, data); err != nil {
		t.Fatalf("Write(%v, %T): %v", shape, data, err)
	}
	if i := bytes.IndexByte(b.Bytes(), '\n'); (i+1)%64 != 0 {
		t.Errorf("Write(%v, %T): header is %d bytes, want a multiple of 64", shape, data, i+1)
	}
	a, err := Read(&b)
	if err != nil {
		t.Fatalf("Read after Write(%v, %T): %v", shape, data, err)
	}
	if !slices.Equal(a.Shape, shape) {
		t.Errorf("Write(%v, %T): read back shape %v", shape, data, a.Shape)
	}
	return a
}

func TestRoundTripFloats(t *testing.T) {
	f32 := []float32{1.5, float32(math.Copysign(0, -1)), float32(math.Inf(-1)), math.MaxFloat32, float32(math.NaN()),
		1e-45}
	a := roundTrip(t, []int{2, 3}, f32)
	got, err := a.Float32s()
	if err != nil || a.Descr != "<f4" || len(got) != len(f32) {
		t.Fatalf("float32: %v %v %v", a.Descr, got, err)
	}
	for i := range f32 {
		if math.Float32bits(got[i]) != math.Float32bits(f32[i]) {
			t.Errorf("float32[%d]: got %v, want %v bit for bit", i, got[i], f32[i])
		}
	}
	f64 := []float64{math.Pi, -1e-300, math.NaN(), math.SmallestNonzeroFloat64}
	b := roundTrip(t, []int{4, 1}, f64)
	got64, err := b.Float64s()
	if err != nil || b.Descr != "<f8" || len(got64) != len(f64) {
		t.Fatalf("float64: %v %v %v", b.Descr, got64, err)
	}
	for i := range f64 {
		if math.Float64bits(got64[i]) != math.Float64bits(f64[i]) {
			t.Errorf("float64[%d]: got %v, want %v bit for bit", i, got64[i], f64[i])
		}
	}
}

func TestRoundTripInts(t *testing.T) {
	i32 := []int32{math.MinInt32, -1, 0, math.MaxInt32}
	a := roundTrip(t, []int{1, 4}, i32)
	if got, err := a.Ints(); err != nil || a.Descr != "<i4" ||
		!slices.Equal(got, []int{math.MinInt32, -1, 0, math.MaxInt32}) {
		t.Errorf("int32: %s %v %v", a.Descr, got, err)
	}
	i64 := []int64{math.MinInt64, math.MaxInt64, 3}
	b := roundTrip(t, []int{3}, i64)
	if got, err := b.Ints(); err != nil || b.Descr != "<i8" || !slices.Equal(got, []int{math.MinInt64, math.MaxInt64, 3}) {
		t.Errorf("int64: %s %v %v", b.Descr, got, err)
	}
}

func TestRoundTripShapes(t *testing.T) {
	for _, shape := range [][]int{{}, {0}, {2, 0, 3}, {1, 1, 1, 1}, {20000}} {
		a := &Array{Shape: shape}
		data := make([]float64, a.Len())
		for i := range data {
			data[i] = float64(i)
		}
		got, err := roundTrip(t, shape, data).Float64s()
		if err != nil || !slices.Equal(got, data) {
			t.Errorf("shape %v: read back %d values, %v", shape, len(got), err)
		}
	}
}

func TestWriteRejects(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape []int
		data  any
		want  string
	}{
		{"count", []int{2, 2}, []float32{1, 2, 3}, "holds 4 elements but data has 3"},
		{"negative", []int{-1}, []float32{}, "holds -1 elements"},
		{"type", []int{1}, []int{1}, "cannot write []int"},
		{"dims", make([]int, MaxDims+1), []float64{}, "more than the 64 allowed"},
	} {
		var b bytes.Buffer
		err := Write(&b, c.shape, c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// WriteFile replaces the file whole and leaves no temporary files, also
// when it fails.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.npy")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []int{2}, []float64{1, 2}); err != nil {
		t.Fatal(err)
	}
	a, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Float64s(); !slices.Equal(got, []float64{1, 2}) {
		t.Errorf("read back %v", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode: %v, %v; want 0644", fi.Mode(), err)
	}
	if err := WriteFile(path, []int{3}, []float64{1, 2}); err == nil {
		t.Error("WriteFile with a bad shape succeeded")
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b[len(b)-16:],
		[]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40}) {
		t.Error("a failed WriteFile changed the existing file")
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir.npy"), []int{1}, []float64{1}); err == nil {
		t.Error("WriteFile into a missing directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only w.npy: %v", len(entries), entries)
	}
}
