package pg_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/goddp/ddp/pg"
)

func TestDtypes(t *testing.T) {
	sizes := map[pg.Dtype]int{pg.Float32: 4, pg.Float64: 8, pg.Float16: 2, pg.BFloat16: 2, pg.Int32: 4, pg.Int64: 8,
		pg.Uint8: 1}
	floats := map[pg.Dtype]bool{pg.Float32: true, pg.Float64: true, pg.Float16: true, pg.BFloat16: true}
	if len(pg.Dtypes()) != len(sizes) {
		t.Fatalf("Dtypes() = %v", pg.Dtypes())
	}
	for _, d := range pg.Dtypes() {
		if d.Size() != sizes[d] || d.IsFloat() != floats[d] || !d.Valid() {
			t.Errorf("%v: size %d, float %v, valid %v", d, d.Size(), d.IsFloat(), d.Valid())
		}
		if p, err := pg.ParseDtype(d.String()); err != nil || p != d {
			t.Errorf("ParseDtype(%q) = %v, %v", d.String(), p, err)
		}
	}
	if pg.Dtype(0).Valid() || pg.Dtype(99).Size() != 0 {
		t.Error("unknown dtypes must be invalid")
	}
	if _, err := pg.ParseDtype("float8"); err == nil {
		t.Error(`ParseDtype("float8") succeeded`)
	}
}

func TestTensorViewsShareMemory(t *testing.T) {
	s := []float32{1, 2, 3, 4}
	x := pg.Float32s(s)
	if x.Len() != 4 || x.Dtype != pg.Float32 {
		t.Fatalf("Float32s: %v x %d", x.Dtype, x.Len())
	}
	pg.View[float32](x.Slice(1, 3))[0] = 20
	if s[1] != 20 {
		t.Errorf("a write through a slice's view did not reach the slice: %v", s)
	}
	if pg.Float64s(nil).Len() != 0 || pg.View[float32](pg.Tensor{Dtype: pg.Float32}) != nil {
		t.Error("empty tensors")
	}
}

func TestNewTensorIsAlignedAndSized(t *testing.T) {
	for _, d := range pg.Dtypes() {
		for _, n := range []int{0, 1, 3, 1000} {
			x := pg.NewTensor(d, n)
			if x.Len() != n || len(x.Data) != n*d.Size() || cap(x.Data) != len(x.Data) {
				t.Errorf("NewTensor(%v, %d): len %d, %d bytes, cap %d", d, n, x.Len(), len(x.Data), cap(x.Data))
			}
			if n > 0 && uintptr(unsafe.Pointer(&x.Data[0]))%8 != 0 {
				t.Errorf("NewTensor(%v, %d) is not 8-byte aligned", d, n)
			}
		}
	}
}

func TestTensorValidate(t *testing.T) {
	for _, bad := range []pg.Tensor{{Dtype: 0, Data: make([]byte, 4)}, {Dtype: pg.Float64, Data: make([]byte, 12)}} {
		if err := bad.Validate(); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%v with %d bytes: got %v, want ErrInvalidArgument", bad.Dtype, len(bad.Data), err)
		}
	}
	if err := pg.Int64s([]int64{1}).Validate(); err != nil {
		t.Error(err)
	}
}
