package gtensor

import (
	"testing"

	"github.com/goddp/ddp/pg"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestTensorOfScalarsAreViews(t *testing.T) {
	f := gorgonia.NewF64(2)
	v, err := TensorOf(f)
	if err != nil {
		t.Fatal(err)
	}
	pg.View[float64](v)[0] = 3
	if float64(*f) != 3 {
		t.Errorf("TensorOf copied the scalar: wrote 3 through it, it holds %v", *f)
	}
	if _, err := TensorOf(gorgonia.NewI(1)); err == nil {
		t.Error("TensorOf took an int scalar")
	}
}

func TestDenseOnRefuses(t *testing.T) {
	if _, err := DenseOn(pg.Float32s(make([]float32, 3)), tensor.Shape{2, 2}); err == nil {
		t.Error("DenseOn backed 4 elements with 3")
	}
	if _, err := DenseOn(pg.Int32s(make([]int32, 4)), tensor.Shape{4}); err == nil {
		t.Error("DenseOn backed a float Dense with int32 memory")
	}
}

func TestDtypeOfRefuses(t *testing.T) {
	if _, err := DtypeOf(tensor.Complex128); err == nil {
		t.Error("DtypeOf mapped complex128")
	}
}
