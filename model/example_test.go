package model_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Train a small MLP without DDP on one fixed batch of 3 rows in a graph
// of batch 4 (the fourth row is padding).
func Example() {
	spec := model.Spec{Kind: "mlp", InputShape: []int{2}, Hidden: []int{8}, Activation: "tanh",
		Classes: 2, Dtype: tensor.Float64, Batch: 4}
	p, err := model.NewParams(spec, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, name := range p.Names {
		fmt.Println(name, p.Shape(i))
	}
	net, err := p.Forward(spec, nil) // DDP: p.Forward(spec, ddp.Node)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := gorgonia.Grad(net.Loss, p.Nodes...); err != nil {
		fmt.Println(err)
		return
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	defer vm.Close()
	opt, _ := optim.New("sgd", 0.5, p.Len())

	x := []float64{1, 1, -1, -1, 1, -1}
	labels := []int{1, 0, 1}
	var first float64
	for step := range 20 {
		if err := net.Feed(spec, x, labels); err != nil {
			fmt.Println(err)
			return
		}
		if err := vm.RunAll(); err != nil {
			fmt.Println(err)
			return
		}
		if step == 0 {
			first = net.LossValue()
		}
		ps, gs, err := optim.NodeTensors(p.Nodes)
		if err == nil {
			err = opt.Step(ps, gs)
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		vm.Reset()
	}
	fmt.Printf("loss fell from %.2f: %v; %d of 3 right\n", first, net.LossValue() < first/2, net.Correct(labels))
	// Output:
	// fc1.weight [2 8]
	// fc1.bias [8]
	// fc2.weight [8 2]
	// fc2.bias [2]
	// loss fell from 0.85: true; 3 of 3 right
}

// SaveNPY writes one .npy file per parameter and the list of what it
// wrote, and leaves the directory's other files alone; CheckSaveDir
// refuses, before a run, a file the save would overwrite that no save
// wrote.
func ExampleParams_SaveNPY() {
	dir, err := os.MkdirTemp("", "model-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the user's"), 0o644)
	spec := model.Spec{Kind: "mlp", InputShape: []int{2}, Activation: "tanh", Classes: 2, Dtype: tensor.Float32, Batch: 1}
	p, _ := model.NewParams(spec, 1)
	if err := p.SaveNPY(dir); err != nil {
		fmt.Println(err)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fmt.Println(e.Name())
	}
	fmt.Println(model.CheckSaveDir(dir, model.ParamNames("mlp", 0)))
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "fc1.bias.npy"), []byte("someone else's"), 0o644)
	fmt.Println(model.CheckSaveDir(other, model.ParamNames("mlp", 0)) != nil)
	// Output:
	// .ddp-train-save
	// fc1.bias.npy
	// fc1.weight.npy
	// notes.txt
	// <nil>
	// true
}

// A model card describes the model completely; SpecFromCard builds it
// again.
func ExampleSpec_Card() {
	spec := model.Spec{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10,
		Dtype: tensor.Float32, Batch: 1}
	card := spec.Card()
	for _, l := range card.Layers {
		fmt.Println(l.Op, l.Name, l.InShape, "→", l.OutShape, l.Padding)
	}
	back, err := model.SpecFromCard(card, 32)
	fmt.Println(back.Kind, back.InputShape, back.Batch, err, card.Check(spec))
	// Output:
	// conv2d conv1 [1 28 28] → [6 28 28] [2 2]
	// relu  [6 28 28] → [6 28 28] []
	// maxpool2d  [6 28 28] → [6 14 14] [0 0]
	// conv2d conv2 [6 14 14] → [16 10 10] [0 0]
	// relu  [16 10 10] → [16 10 10] []
	// maxpool2d  [16 10 10] → [16 5 5] [0 0]
	// flatten  [16 5 5] → [400] []
	// linear fc1 [400] → [120] []
	// relu  [120] → [120] []
	// linear fc2 [120] → [84] []
	// relu  [84] → [84] []
	// linear fc3 [84] → [10] []
	// cnn [1 28 28] 32 <nil> <nil>
}
