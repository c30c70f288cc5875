package optim_test

import (
	"fmt"

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
