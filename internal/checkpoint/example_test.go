package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goddp/ddp/internal/checkpoint"
	"github.com/goddp/ddp/internal/model"
	"github.com/goddp/ddp/internal/optim"
	"gorgonia.org/tensor"
)

func Example() {
	root, err := os.MkdirTemp("", "checkpoint-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "ckpt")

	spec := model.Spec{Kind: "mlp", InputShape: []int{4}, Hidden: []int{3}, Activation: "relu", Classes: 2, Dtype: tensor.Float32, Batch: 8}
	p, _ := model.NewParams(spec, 1)
	opt, _ := optim.New("sgd", 0.1, p.Len())
	if err := checkpoint.Save(dir, checkpoint.Capture(100, p, opt)); err != nil {
		fmt.Println(err)
		return
	}

	c, err := checkpoint.Load(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	fresh, _ := model.NewParams(spec, 2)
	freshOpt, _ := optim.New("sgd", 0.1, fresh.Len())
	if err := c.Restore(fresh, freshOpt); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("step", c.Step, c.Dtype, len(c.Params), "parameters")
	fmt.Println("fc1.weight restored:", fmt.Sprint(fresh.Value(0)) == fmt.Sprint(p.Value(0)))

	momentum, _ := optim.New("momentum", 0.1, fresh.Len())
	fmt.Println(c.Restore(fresh, momentum))
	// Output:
	// step 100 float32 4 parameters
	// fc1.weight restored: true
	// checkpoint: checkpoint does not match this run: it was written by a run with the sgd optimizer and this run uses momentum
}
