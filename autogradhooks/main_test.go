package autogradhooks

import (
	"testing"

	"go.uber.org/goleak"
)

// TapeMachine.RunAll runs the tape on a goroutine of its own, and the hooks
// run there; every run must leave none behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
