package pg

import (
	"fmt"
	"unsafe"
)

// Dtype is the element type of a Tensor.
type Dtype uint8

// The element types a process group reduces. Float16 and BFloat16 are
// stored as their 16-bit patterns and reduced in float32.
const (
	Float32 Dtype = iota + 1
	Float64
	Float16
	BFloat16
	Int32
	Int64
	Uint8
)

// Dtypes lists every supported Dtype, for tests and validation.
func Dtypes() []Dtype {
	return []Dtype{Float32, Float64, Float16, BFloat16, Int32, Int64, Uint8}
}

// Size is the number of bytes in one element.
func (d Dtype) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case Float16, BFloat16:
		return 2
	case Uint8:
		return 1
	}
	return 0
}

// IsFloat reports whether d is a floating-point type.
func (d Dtype) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// Valid reports whether d is one of the supported types.
func (d Dtype) Valid() bool { return d.Size() != 0 }

func (d Dtype) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Uint8:
		return "uint8"
	}
	return fmt.Sprintf("Dtype(%d)", uint8(d))
}

// ParseDtype maps a name such as "float32" to its Dtype.
func ParseDtype(s string) (Dtype, error) {
	for _, d := range Dtypes() {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("pg: unknown dtype %q (want one of float32, float64, float16, bfloat16, int32, int64, uint8)", s)
}

// Tensor is a flat buffer of elements of one Dtype, in host memory or in
// device memory.
//
// A host tensor has Data, the raw little-endian memory, and a nil Device;
// the typed constructors (Float32s and friends) share memory with the slice
// they are given, so a collective writes its result straight into the
// caller's slice.
//
// A device tensor (DeviceTensor) has a Device and nil Data. Only backends
// that run on device memory accept it (pg/nccl); host-only backends refuse
// it with ErrDeviceTensor. View returns nil for it.
type Tensor struct {
	Dtype  Dtype
	Data   []byte
	Device *DeviceMemory // nil: host memory
}

// Len is the number of elements.
func (t Tensor) Len() int {
	if s := t.Dtype.Size(); s > 0 {
		return t.Bytes() / s
	}
	return 0
}

// Slice returns elements [i, j) as a Tensor sharing memory with t. Like
// slicing, it panics when [i, j) is out of range.
func (t Tensor) Slice(i, j int) Tensor {
	s := t.Dtype.Size()
	if m := t.Device; m != nil {
		if i < 0 || j < i || j*s > m.Bytes {
			panic(fmt.Sprintf("pg: device tensor slice [%d:%d] out of range of %d elements", i, j, t.Len()))
		}
		return Tensor{Dtype: t.Dtype,
			Device: &DeviceMemory{Ordinal: m.Ordinal, Ptr: m.Ptr + uintptr(i*s), Bytes: (j - i) * s}}
	}
	return Tensor{Dtype: t.Dtype, Data: t.Data[i*s : j*s : j*s]}
}

// Validate checks that t has a known dtype and a whole number of elements,
// and, for a device tensor, a plausible ordinal and pointer and no host
// bytes.
func (t Tensor) Validate() error {
	if !t.Dtype.Valid() {
		return fmt.Errorf("%w: unknown dtype %v", ErrInvalidArgument, t.Dtype)
	}
	if t.Device != nil {
		if err := t.validateDevice(); err != nil {
			return err
		}
	}
	if n := t.Bytes(); n%t.Dtype.Size() != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements", ErrInvalidArgument, n, t.Dtype)
	}
	return nil
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// Float32s views s as a Float32 tensor. The tensor shares s's memory.
func Float32s(s []float32) Tensor { return Tensor{Dtype: Float32, Data: bytesOf(s)} }

// Float64s views s as a Float64 tensor.
func Float64s(s []float64) Tensor { return Tensor{Dtype: Float64, Data: bytesOf(s)} }

// Float16s views s, holding IEEE 754 half-precision bit patterns, as a Float16 tensor.
func Float16s(s []uint16) Tensor { return Tensor{Dtype: Float16, Data: bytesOf(s)} }

// BFloat16s views s, holding bfloat16 bit patterns, as a BFloat16 tensor.
func BFloat16s(s []uint16) Tensor { return Tensor{Dtype: BFloat16, Data: bytesOf(s)} }

// Int32s views s as an Int32 tensor.
func Int32s(s []int32) Tensor { return Tensor{Dtype: Int32, Data: bytesOf(s)} }

// Int64s views s as an Int64 tensor.
func Int64s(s []int64) Tensor { return Tensor{Dtype: Int64, Data: bytesOf(s)} }

// Uint8s views s as a Uint8 tensor.
func Uint8s(s []uint8) Tensor { return Tensor{Dtype: Uint8, Data: s} }

// NewTensor allocates a zeroed tensor of n elements. Its memory is 8-byte
// aligned, so any typed view of it is safe.
func NewTensor(d Dtype, n int) Tensor {
	words := make([]uint64, (n*d.Size()+7)/8)
	b := bytesOf(words)
	return Tensor{Dtype: d, Data: b[: n*d.Size() : n*d.Size()]}
}

// View reinterprets t's memory as a slice of T. The caller must pick a T
// whose size matches t.Dtype (for example uint16 for Float16).
func View[T any](t Tensor) []T {
	var zero T
	n := len(t.Data) / int(unsafe.Sizeof(zero))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(t.Data))), n)
}
