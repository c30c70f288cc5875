package gtensor_test

import (
	"fmt"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"gorgonia.org/tensor"
)

func Example() {
	v := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))

	t, err := gtensor.TensorOf(v) // v's memory, no copy
	if err != nil {
		fmt.Println(err)
		return
	}
	pg.View[float32](t)[0] = 10 // what a collective does to it
	fmt.Println(t.Dtype, t.Len(), v.Float32s())

	d, err := gtensor.DenseOn(t, tensor.Shape{4}) // and back, another shape
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Shape(), gtensor.SameMemory(d, t), gtensor.SameMemory(d, t.Slice(0, 2)))

	dt, err := gtensor.DtypeOf(tensor.Float64)
	fmt.Println(dt, err)
	_, err = gtensor.TensorOf(tensor.New(tensor.WithBacking([]int{1})))
	fmt.Println(err)
	// Output:
	// float32 4 [10 2 3 4]
	// (4) true false
	// float64 <nil>
	// values of dtype int can't be reduced; use float32 or float64
}
