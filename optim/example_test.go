package optim_test

import (
	"fmt"
	"strings"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

func Example() {
	w := []float64{1, -2} // a parameter's memory
	g := []float64{0.5, -1}

	opt, err := optim.New("momentum", 0.1, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		if err := opt.Step([]pg.Tensor{pg.Float64s(w)}, []pg.Tensor{pg.Float64s(g)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	st := opt.State()
	fmt.Printf("w = %.3f\n", w)
	fmt.Printf("step %d, momentum/0 = %.2f\n", st.Step, st.Buffers["momentum/0"])

	_, err = optim.New("lbfgs", 0.1, 1)
	fmt.Println(err)
	// Output:
	// w = [0.855 -1.710]
	// step 2, momentum/0 = [0.95 -1.90]
	// optim: unknown optimizer "lbfgs"; choose one of sgd, momentum, adam, adamw
}

// A warmup of 3 steps from a third of the rate, then a cosine down to
// 0.001 over the remaining 5 steps: torch's SequentialLR([LinearLR(1/3,
// 1, 3), CosineAnnealingLR(5, 0.001)], [3]), driving AdamW.
func ExampleNewSchedule() {
	w := []float64{1, -2}
	g := []float64{0.5, -1}
	opt, err := optim.NewWith("adamw", optim.Options{LR: optim.Set(0.1), WeightDecay: optim.Set(0)}, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	sched, err := optim.NewSchedule(optim.Recipe{Kind: "cosine", LR: 0.1, Steps: 8, WarmupSteps: 3, MinLR: 0.001})
	if err != nil {
		fmt.Println(err)
		return
	}
	var rates []string
	for range 8 {
		rates = append(rates, fmt.Sprintf("%.4f", sched.LR()))
		if err := opt.SetLR(sched.LR()); err != nil {
			fmt.Println(err)
			return
		}
		if err := opt.Step([]pg.Tensor{pg.Float64s(w)}, []pg.Tensor{pg.Float64s(g)}); err != nil {
			fmt.Println(err)
			return
		}
		sched.Step()
	}
	fmt.Println(strings.Join(rates, " "))
	fmt.Printf("%s at step %d; w = %.3f\n", sched.Name(), sched.State().Step, w)
	// Output:
	// 0.0333 0.0556 0.0778 0.1000 0.0905 0.0658 0.0352 0.0105
	// sequential/linear/cosine at step 8; w = [0.531 -1.531]
}
