package npy

import (
	"encoding/binary"
	"math"
)

// dtype is a simple numpy element type.
type dtype struct {
	kind byte // 'f' float, 'i' signed int, 'u' unsigned int, 'b' bool
	size int  // bytes per element
}

// parseDescr checks that descr is a dtype Read supports: little-endian
// (or, for one-byte types, any byte order) float, integer or bool.
func parseDescr(descr string) (dtype, error) {
	const fix = "convert it before saving, e.g. a.astype('<f4') for features or a.astype('<i8') for labels"
	if len(descr) != 3 || descr[2] < '1' || descr[2] > '8' {
		return dtype{}, formatErr("dtype %q is not supported; %s", descr, fix)
	}
	dt := dtype{kind: descr[1], size: int(descr[2] - '0')}
	sizes := map[byte]string{'f': "48", 'i': "1248", 'u': "1248", 'b': "1"}[dt.kind]
	if !containsByte(sizes, descr[2]) {
		return dtype{}, formatErr("dtype %q is not supported; %s", descr, fix)
	}
	switch order := descr[0]; {
	case order == '<' || dt.size == 1 && (order == '|' || order == '>'):
		return dt, nil
	case order == '>':
		return dtype{}, formatErr("dtype %q is big-endian, which is not supported; convert it with a.astype('<%s')", descr,
			descr[1:])
	default:
		return dtype{}, formatErr("dtype %q has an unknown byte order; %s", descr, fix)
	}
}

func containsByte(s string, c byte) bool {
	for i := range len(s) {
		if s[i] == c {
			return true
		}
	}
	return false
}

// check validates a (which callers may have built by hand) and returns
// its dtype.
func (a *Array) check() (dtype, error) {
	dt, err := parseDescr(a.Descr)
	if err != nil {
		return dt, err
	}
	n := a.Len()
	if n < 0 || n > maxInt/dt.size || len(a.Data) != n*dt.size {
		return dt, formatErr("array of shape %s and dtype %s holds %d bytes of data, which does not match", pyTuple(a.Shape),
			a.Descr, len(a.Data))
	}
	return dt, nil
}

// Float64s returns the elements converted to float64, from any supported
// dtype. 64-bit integers beyond 2^53 are rounded.
func (a *Array) Float64s() ([]float64, error) {
	dt, err := a.check()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(a.Data)/dt.size)
	for i := range out {
		out[i] = a.float(dt, i)
	}
	return out, nil
}

// Float32s returns the elements converted to float32, rounding float64
// and wide integers to the nearest float32.
func (a *Array) Float32s() ([]float32, error) {
	dt, err := a.check()
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(a.Data)/dt.size)
	for i := range out {
		if dt.kind == 'f' && dt.size == 4 {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:]))
		} else {
			out[i] = float32(a.float(dt, i))
		}
	}
	return out, nil
}

// Ints returns the elements of an integer or bool array as ints. Float
// arrays are an error: labels must be integers.
func (a *Array) Ints() ([]int, error) {
	dt, err := a.check()
	if err != nil {
		return nil, err
	}
	if dt.kind == 'f' {
		return nil, formatErr("dtype %s is floating point, but labels must be integers; save them with y.astype('<i8')",
			a.Descr)
	}
	out := make([]int, len(a.Data)/dt.size)
	for i := range out {
		if dt.kind == 'u' && dt.size == 8 {
			u := binary.LittleEndian.Uint64(a.Data[8*i:])
			if u > math.MaxInt {
				return nil, formatErr("element %d is %d, too large for an int", i, u)
			}
			out[i] = int(u)
			continue
		}
		v := a.int64(dt, i)
		if v < math.MinInt || v > math.MaxInt {
			return nil, formatErr("element %d is %d, too large for an int on this machine", i, v)
		}
		out[i] = int(v)
	}
	return out, nil
}

// float returns element i as a float64.
func (a *Array) float(dt dtype, i int) float64 {
	switch {
	case dt.kind == 'f' && dt.size == 4:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(a.Data[4*i:])))
	case dt.kind == 'f':
		return math.Float64frombits(binary.LittleEndian.Uint64(a.Data[8*i:]))
	case dt.kind == 'u' && dt.size == 8:
		return float64(binary.LittleEndian.Uint64(a.Data[8*i:]))
	}
	return float64(a.int64(dt, i))
}

// int64 returns element i of an integer or bool array, except uint64.
func (a *Array) int64(dt dtype, i int) int64 {
	b := a.Data[dt.size*i:]
	switch {
	case dt.kind == 'b':
		if b[0] != 0 {
			return 1
		}
		return 0
	case dt.kind == 'u' && dt.size == 1:
		return int64(b[0])
	case dt.kind == 'u' && dt.size == 2:
		return int64(binary.LittleEndian.Uint16(b))
	case dt.kind == 'u' && dt.size == 4:
		return int64(binary.LittleEndian.Uint32(b))
	case dt.size == 1:
		return int64(int8(b[0]))
	case dt.size == 2:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case dt.size == 4:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}
