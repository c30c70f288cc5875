package torch_test

import (
	"context"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/tests/testmodel"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The worlds and helpers every test here uses (package testworld).

func groupsOf(t testing.TB, backend string, n int) []pg.ProcessGroup {
	return testworld.Groups(t, backend, n)
}

func onGroups(gs []pg.ProcessGroup, f func(rank int, g pg.ProcessGroup) error) []error {
	return testworld.OnGroups(gs, f)
}

func parallel(n int, f func(r int) error) []error { return testworld.Parallel(n, f) }

func noErrors(t testing.TB, errs []error) { t.Helper(); testworld.NoErrors(t, errs) }

func testCtx(t testing.TB) context.Context { return testworld.Ctx(t) }

// branchNames are the branch model's parameters, in order.
var branchNames = testmodel.BranchNames()
