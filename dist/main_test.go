package dist

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests for a goroutine left running: the
// two-rank test starts one per rank, and each group starts its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
