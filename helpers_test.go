package ddp

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/reducer"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The worlds and helpers every test here uses (package testworld).

func world(t testing.TB, n int) []*local.Group { return testworld.Local(t, n) }

func groupsOf(t testing.TB, backend string, n int) []pg.ProcessGroup {
	return testworld.Groups(t, backend, n)
}

func onRanks(gs []*local.Group, f func(rank int, g pg.ProcessGroup) error) []error {
	return testworld.OnGroups(gs, f)
}

func onGroups(gs []pg.ProcessGroup, f func(rank int, g pg.ProcessGroup) error) []error {
	return testworld.OnGroups(gs, f)
}

func parallel(n int, f func(r int) error) []error { return testworld.Parallel(n, f) }

func noErrors(t testing.TB, errs []error) { t.Helper(); testworld.NoErrors(t, errs) }

func testCtx(t testing.TB) context.Context { return testworld.Ctx(t) }

// mlpParams describes a small MLP's parameters, float64.
func mlpParams(sizes ...int) []reducer.Param {
	var ps []reducer.Param
	for i := 0; i+1 < len(sizes); i++ {
		ps = append(ps,
			reducer.Param{Name: fmt.Sprintf("fc%d.weight", i+1), Shape: []int{sizes[i], sizes[i+1]}, Dtype: pg.Float64},
			reducer.Param{Name: fmt.Sprintf("fc%d.bias", i+1), Shape: []int{sizes[i+1]}, Dtype: pg.Float64})
	}
	return ps
}
