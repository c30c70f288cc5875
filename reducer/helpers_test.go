package reducer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"go.uber.org/goleak"
	"gorgonia.org/tensor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// world starts n in-process ranks with a short timeout, closed at cleanup.
func world(t testing.TB, n int) []*local.Group {
	t.Helper()
	gs, err := local.New(n, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// onRanks runs f on every rank at once and returns each rank's error.
func onRanks(gs []*local.Group, f func(rank int, g pg.ProcessGroup) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(r, g) })
	}
	wg.Wait()
	return errs
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mlpParams describes a small MLP's parameters, float64.
func mlpParams(sizes ...int) []Param {
	var ps []Param
	for i := 0; i+1 < len(sizes); i++ {
		ps = append(ps,
			Param{Name: fmt.Sprintf("fc%d.weight", i+1), Shape: []int{sizes[i], sizes[i+1]}, Dtype: tensor.Float64},
			Param{Name: fmt.Sprintf("fc%d.bias", i+1), Shape: []int{sizes[i+1]}, Dtype: tensor.Float64})
	}
	return ps
}
