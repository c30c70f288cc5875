package npy

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// Every supported dtype converts to the same values.
func TestConvertDtypes(t *testing.T) {
	for _, c := range []struct {
		descr string
		data  string // the elements 1, 0, 7 (or true, false, true)
		want  []int
	}{
		{"<f4", "\x00\x00\x80\x3f" + "\x00\x00\x00\x00" + "\x00\x00\xe0\x40", nil},
		{"<f8", "\x00\x00\x00\x00\x00\x00\xf0\x3f" + "\x00\x00\x00\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x1c\x40",
			nil},
		{"<i1", "\x01\x00\x07", []int{1, 0, 7}},
		{"|i1", "\x01\x00\x07", []int{1, 0, 7}},
		{"|u1", "\x01\x00\x07", []int{1, 0, 7}},
		{"<i2", "\x01\x00\x00\x00\x07\x00", []int{1, 0, 7}},
		{"<u2", "\x01\x00\x00\x00\x07\x00", []int{1, 0, 7}},
		{"<i4", "\x01\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00", []int{1, 0, 7}},
		{"<u4", "\x01\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00", []int{1, 0, 7}},
		{"<i8", "\x01" + strings.Repeat("\x00", 15) + "\x07" + strings.Repeat("\x00", 7), []int{1, 0, 7}},
		{"<u8", "\x01" + strings.Repeat("\x00", 15) + "\x07" + strings.Repeat("\x00", 7), []int{1, 0, 7}},
		{"|b1", "\x01\x00\x01", []int{1, 0, 1}},
	} {
		a := &Array{Shape: []int{3}, Descr: c.descr, Data: []byte(c.data)}
		wantF := []float64{1, 0, 7}
		if c.descr == "|b1" {
			wantF = []float64{1, 0, 1}
		}
		f64, err := a.Float64s()
		if err != nil || !slices.Equal(f64, wantF) {
			t.Errorf("%s: Float64s = %v, %v; want %v", c.descr, f64, err, wantF)
		}
		f32, err := a.Float32s()
		if err != nil || len(f32) != 3 || float64(f32[2]) != wantF[2] || f32[0] != 1 {
			t.Errorf("%s: Float32s = %v, %v; want %v", c.descr, f32, err, wantF)
		}
		ints, err := a.Ints()
		if c.want == nil {
			if err == nil || !strings.Contains(err.Error(), "labels must be integers") {
				t.Errorf("%s: Ints gave %v, %v; want an error saying labels must be integers", c.descr, ints, err)
			}
		} else if err != nil || !slices.Equal(ints, c.want) {
			t.Errorf("%s: Ints = %v, %v; want %v", c.descr, ints, err, c.want)
		}
	}
}

func TestConvertSignsAndLimits(t *testing.T) {
	neg := &Array{Shape: []int{2}, Descr: "<i2", Data: []byte{0xff, 0xff, 0x00, 0x80}}
	if got, err := neg.Ints(); err != nil || !slices.Equal(got, []int{-1, math.MinInt16}) {
		t.Errorf("<i2 negatives: %v, %v", got, err)
	}
	big := &Array{Shape: []int{1}, Descr: "<u8", Data: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	if got, err := big.Ints(); err == nil {
		t.Errorf("<u8 2^64-1: Ints = %v, want an error", got)
	}
	if got, err := big.Float64s(); err != nil || got[0] != math.MaxUint64 {
		t.Errorf("<u8 2^64-1: Float64s = %v, %v", got, err)
	}
	f8 := &Array{Shape: []int{1}, Descr: "<f8", Data: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f}}
	if got, err := f8.Float32s(); err != nil || !math.IsInf(float64(got[0]), 1) {
		t.Errorf("<f8 +Inf: Float32s = %v, %v", got, err)
	}
}

// Arrays built by hand are checked before conversion.
func TestConvertChecksArray(t *testing.T) {
	for _, a := range []*Array{
		{Shape: []int{2}, Descr: "<f4", Data: make([]byte, 4)},
		{Shape: []int{-1}, Descr: "<f4", Data: nil},
		{Shape: []int{1}, Descr: "float32", Data: make([]byte, 4)},
	} {
		if _, err := a.Float64s(); err == nil {
			t.Errorf("%+v: Float64s succeeded, want an error", a)
		}
		if _, err := a.Ints(); err == nil {
			t.Errorf("%+v: Ints succeeded, want an error", a)
		}
	}
}

func TestLen(t *testing.T) {
	for _, c := range []struct {
		shape []int
		want  int
	}{{nil, 1}, {[]int{}, 1}, {[]int{0, 5}, 0}, {[]int{2, 3, 4}, 24}, {[]int{-2, 3}, -1}, {[]int{math.MaxInt, 2}, -1}} {
		if got := (&Array{Shape: c.shape}).Len(); got != c.want {
			t.Errorf("Len(%v) = %d, want %d", c.shape, got, c.want)
		}
	}
}
