package replicas_test

import (
	"testing"

	"github.com/goddp/ddp/tests/testmodel"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The branch model's heads and runs (package testmodel), by short names.
const (
	headSum    = testmodel.HeadSum
	headSumX1  = testmodel.HeadSumX1
	headFC2    = testmodel.HeadFC2
	headFC3    = testmodel.HeadFC3
	headConcat = testmodel.HeadConcat
	headShared = testmodel.HeadShared
	headTrunk  = testmodel.HeadTrunk
)

type branchCase = testmodel.BranchCase
