package npy

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// FuzzRead checks that Read never panics, returns only *FormatError, and
// that what it accepts is consistent and converts without panicking.
func FuzzRead(f *testing.F) {
	f.Add([]byte(goldenF4))
	f.Add([]byte(goldenI8))
	f.Add([]byte(withHeader(2, "{'descr': '|b1', 'fortran_order': False, 'shape': (2L, 1), }", "\x01\x00")))
	f.Add([]byte(withHeader(3, "{'descr': '<u8', 'fortran_order': False, 'shape': (), }",
		"\xff\xff\xff\xff\xff\xff\xff\xff")))
	f.Add([]byte(withHeader(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1000000, 1000000), }", "")))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := Read(bytes.NewReader(in))
		if err != nil {
			if _, ok := errors.AsType[*FormatError](err); !ok {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			return
		}
		dt, err := a.check()
		if err != nil {
			t.Fatalf("Read returned an inconsistent array: %v", err)
		}
		f64, err := a.Float64s()
		if err != nil || len(f64) != a.Len() {
			t.Fatalf("Float64s: %d values, %v; want %d", len(f64), err, a.Len())
		}
		if _, err := a.Float32s(); err != nil {
			t.Fatalf("Float32s: %v", err)
		}
		ints, err := a.Ints()
		if (err == nil) == (dt.kind == 'f') && !(dt.kind == 'u' && dt.size == 8) {
			t.Fatalf("Ints on %s: err = %v", a.Descr, err)
		}
		if err == nil {
			// Integers survive a write as int64 and a read back.
			i64 := make([]int64, len(ints))
			for i, v := range ints {
				i64[i] = int64(v)
			}
			var b bytes.Buffer
			if err := Write(&b, a.Shape, i64); err != nil {
				t.Fatalf("Write: %v", err)
			}
			back, err := Read(&b)
			if err != nil {
				t.Fatalf("Read after Write: %v", err)
			}
			if got, err := back.Ints(); err != nil || !slices.Equal(got, ints) || !slices.Equal(back.Shape, a.Shape) {
				t.Fatalf("round trip changed the array: %v %v", got, err)
			}
		}
	})
}
