package npy_test

import (
	"bytes"
	"fmt"

	"github.com/goddp/ddp/npy"
)

// Write an array as numpy.save would, and read it back.
func Example() {
	var b bytes.Buffer
	if err := npy.Write(&b, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d bytes: header %d, data %d\n", b.Len(), b.Len()-24, 24)

	a, err := npy.Read(&b)
	if err != nil {
		fmt.Println(err)
		return
	}
	x, _ := a.Float64s()
	fmt.Println(a.Descr, a.Shape, a.Len(), x)

	_, err = a.Ints()
	fmt.Println(err)
	// Output:
	// 152 bytes: header 128, data 24
	// <f4 [2 3] 6 [1 2 3 4 5 6]
	// npy: dtype <f4 is floating point, but labels must be integers; save them with y.astype('<i8')
}
