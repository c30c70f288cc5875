package checkpoint_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/optim"
	G "gorgonia.org/gorgonia"
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

	// Any Gorgonia model: its parameter nodes, each with a value and a name.
	model := func(fill float32) checkpoint.Nodes {
		g := G.NewGraph()
		w := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 3), G.WithName("fc1.weight"), G.WithInit(G.ValuesOf(fill)))
		b := G.NewVector(g, tensor.Float32, G.WithShape(3), G.WithName("fc1.bias"), G.WithInit(G.Zeroes()))
		return checkpoint.Nodes{w, b}
	}
	p := model(0.5)
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
	fresh := model(0)
	freshOpt, _ := optim.New("sgd", 0.1, fresh.Len())
	if err := c.Restore(fresh, freshOpt); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("step", c.Step, c.Dtype, len(c.Params), "parameters")
	fmt.Println("fc1.weight restored:", fresh.Value(0)[0], fmt.Sprint(fresh.Value(0)) == fmt.Sprint(p.Value(0)))

	momentum, _ := optim.New("momentum", 0.1, fresh.Len())
	fmt.Println(c.Restore(fresh, momentum))
	// Output:
	// step 100 float32 2 parameters
	// fc1.weight restored: 0.5 true
	// checkpoint: checkpoint does not match this run: it was written by a run with the sgd optimizer and this run uses momentum
}

// Keeping the last two checkpoints: when the newest is damaged, LoadWith
// falls back to the one before, with a warning.
func ExampleLoadWith() {
	root, err := os.MkdirTemp("", "checkpoint-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "ckpt")
	o := checkpoint.Options{Keep: 2}
	for step := 100; step <= 300; step += 100 {
		c := &checkpoint.Checkpoint{Step: step, Params: map[string][]float64{"w": {float64(step)}}}
		if err := checkpoint.SaveWith(dir, c, o); err != nil {
			fmt.Println(err)
			return
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fmt.Println(e.Name())
	}

	// Damage the newest checkpoint's parameter file.
	f, _ := os.OpenFile(filepath.Join(dir, "step-000000300", "params", "w.npy"), os.O_WRONLY, 0)
	f.WriteAt([]byte{0xff}, 130)
	f.Close()

	if _, _, err := checkpoint.LoadWith(dir, checkpoint.Options{Keep: 1}); err != nil {
		fmt.Println("keep 1:", strings.ReplaceAll(err.Error(), root, "..."))
	}
	c, from, err := checkpoint.LoadWith(dir, o) // o.Logger gets the warning
	fmt.Println("keep 2: step", c.Step, "from", filepath.Base(from), err)
	// Output:
	// latest
	// step-000000200
	// step-000000300
	// keep 1: checkpoint: bad checkpoint: .../ckpt/step-000000300/params/w.npy: damaged: its checksum is crc32c:26aaded3, but the manifest recorded crc32c:9711f0ef
	// keep 2: step 200 from step-000000200 <nil>
}

// Saving into a directory that holds other files (a home directory, a
// mount point): each checkpoint is its own step directory, latest names
// the newest, and nothing else in the directory is touched. CheckDir
// refuses a directory where a file of a checkpoint's names is someone
// else's.
func ExampleSave() {
	dir, err := os.MkdirTemp("", "checkpoint-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the user's"), 0o644)
	for step := 1; step <= 2; step++ {
		c := &checkpoint.Checkpoint{Step: step, Params: map[string][]float64{"w": {float64(step)}}}
		if err := checkpoint.Save(dir, c); err != nil {
			fmt.Println(err)
			return
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fmt.Println(e.Name())
	}
	fmt.Println(checkpoint.CheckDir(dir))

	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"name": "a web app"}`), 0o644)
	err = checkpoint.CheckDir(dir)
	fmt.Println(errors.Is(err, checkpoint.ErrNotOurs),
		strings.Contains(err.Error(), "manifest.json: it is not a checkpoint's manifest"))
	// Output:
	// latest
	// notes.txt
	// step-000000002
	// <nil>
	// true true
}
