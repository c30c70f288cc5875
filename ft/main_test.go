package ft

import (
	"testing"

	"go.uber.org/goleak"
)

// Joins, tick loops, servers and clients start goroutines; none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
