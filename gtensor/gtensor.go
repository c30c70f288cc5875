package gtensor

import (
	"fmt"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TensorOf views a Gorgonia value's memory as a pg.Tensor, without
// copying: writing the tensor writes the value.
func TensorOf(v gorgonia.Value) (pg.Tensor, error) {
	if d, ok := v.(*tensor.Dense); ok && !d.IsScalar() {
		// The typed views allocate nothing; Data() builds an interface
		// through reflect on every call, twice per gradient per step.
		switch d.Dtype() {
		case tensor.Float32:
			return pg.Float32s(d.Float32s()), nil
		case tensor.Float64:
			return pg.Float64s(d.Float64s()), nil
		}
	}
	switch v := v.(type) {
	case tensor.Tensor:
		switch data := v.Data().(type) {
		case []float32:
			return pg.Float32s(data), nil
		case []float64:
			return pg.Float64s(data), nil
		}
		return pg.Tensor{}, fmt.Errorf("values of dtype %v can't be reduced; use float32 or float64", v.Dtype())
	case *gorgonia.F32:
		return pg.Float32s(unsafe.Slice((*float32)(v), 1)), nil
	case *gorgonia.F64:
		return pg.Float64s(unsafe.Slice((*float64)(v), 1)), nil
	}
	return pg.Tensor{}, fmt.Errorf("values of type %T can't be reduced; use float32 or float64 tensors", v)
}

// DtypeOf maps a Gorgonia dtype to the process-group dtype that carries it.
func DtypeOf(dt tensor.Dtype) (pg.Dtype, error) {
	switch dt {
	case tensor.Float32:
		return pg.Float32, nil
	case tensor.Float64:
		return pg.Float64, nil
	case tensor.Int32:
		return pg.Int32, nil
	case tensor.Int64:
		return pg.Int64, nil
	case tensor.Uint8:
		return pg.Uint8, nil
	}
	return 0, fmt.Errorf("dtype %v cannot be communicated; use float32 or float64 parameters", dt)
}

// DenseOn returns a *tensor.Dense of the given shape whose backing is t's
// memory, without copying: the reverse of TensorOf. t must be float32 or
// float64 and hold exactly shape's number of elements.
func DenseOn(t pg.Tensor, shape tensor.Shape) (*tensor.Dense, error) {
	if n := shape.TotalSize(); n != t.Len() {
		return nil, fmt.Errorf("gtensor: a %v tensor of %d elements cannot back shape %v (%d elements)", t.Dtype, t.Len(),
			shape, n)
	}
	var backing any
	switch t.Dtype {
	case pg.Float32:
		backing = pg.View[float32](t)
	case pg.Float64:
		backing = pg.View[float64](t)
	default:
		return nil, fmt.Errorf("gtensor: %v tensors cannot back a Gorgonia value; use float32 or float64", t.Dtype)
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(backing)), nil
}

// SameMemory reports whether v's backing is exactly t's memory, the same
// start and the same size, as DenseOn makes it. A caller that keeps a
// Dense from DenseOn checks it with SameMemory before reusing it, since
// the memory behind t may have moved (a bucket rebuilt).
func SameMemory(v *tensor.Dense, t pg.Tensor) bool {
	return v.Uintptr() == uintptr(unsafe.Pointer(unsafe.SliceData(t.Data))) && int(v.MemSize()) == len(t.Data)
}
