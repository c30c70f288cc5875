package libnccl

import (
	"testing"

	"go.uber.org/goleak"
)

// NCCL starts threads of its own, but no goroutines: goleak sees only Go's.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
