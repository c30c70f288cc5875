package dataset_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/npy"
)

func Example() {
	dir, _ := os.MkdirTemp("", "dataset-example")
	defer os.RemoveAll(dir)
	xPath, yPath := filepath.Join(dir, "X.npy"), filepath.Join(dir, "y.npy")
	_ = npy.WriteFile(xPath, []int{3, 2}, []float32{0, 1, 2, 3, 4, 5})
	_ = npy.WriteFile(yPath, []int{3}, []int64{2, 0, 1})

	ds, err := dataset.Load(xPath, yPath, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ds.N, ds.D, ds.Classes, ds.Shape)

	x, y := make([]float64, 2*ds.D), make([]int, 2)
	ds.Gather([]int{2, 0}, x, y)
	fmt.Println(x, y)

	_, err = dataset.Load(xPath, yPath, 2)
	fmt.Println(errors.Is(err, dataset.ErrBadInput), err == nil)
	// Output:
	// 3 2 3 [2]
	// [4 5 0 1] [1 2]
	// true false
}

// The built-in problem: 32 features, 4 classes, the same for the same seed.
func ExampleSynthetic() {
	ds := dataset.Synthetic(1, 1000)
	fmt.Println(ds.N, ds.D, ds.Classes, ds.Shape, len(ds.X))
	fmt.Printf("%.4f %d\n", ds.X[0], ds.Y[:8])
	// Output:
	// 1000 32 4 [32] 32000
	// -1.9503 [2 2 1 2 2 3 2 3]
}
