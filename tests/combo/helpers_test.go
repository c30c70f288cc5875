package combo_test

import (
	"testing"

	"github.com/goddp/ddp/tests/testmodel"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// branchNames are the branch model's parameters, in order.
var branchNames = testmodel.BranchNames()
