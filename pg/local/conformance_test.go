package local_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// world is the pgtest.World of the local backend.
func world(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
	groups, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatalf("local.New(%d): %v", n, err)
	}
	out := make([]pg.ProcessGroup, n)
	for i, g := range groups {
		out[i] = g
	}
	return out
}

func TestConformance(t *testing.T) { pgtest.Run(t, world) }
