package layers_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines: the tape machine runs each RunAll
// on a goroutine of its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
