package pgtest

import (
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// World creates n connected ranks whose group timeout is timeout. Rank i
// of the result must have Rank() == i. The suite closes every group it is
// given; the factory registers any other cleanup with t.Cleanup.
type World func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup
