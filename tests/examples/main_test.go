package examples_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the tests for a goroutine left running (exec starts some
// per command, which end when it is waited for).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
