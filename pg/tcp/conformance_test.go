package tcp

import (
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// TestConformance runs the suite with shared memory on (it must then be
// in use: every rank is in this process) and with it off.
func TestConformance(t *testing.T) {
	t.Run("shm", func(t *testing.T) { pgtest.Run(t, worldShm(t, false)) })
	t.Run("tcp", func(t *testing.T) { pgtest.Run(t, worldShm(t, true)) })
}

func worldShm(t *testing.T, off bool) func(testing.TB, int, time.Duration) []pg.ProcessGroup {
	return func(tb testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		gs := newGroups(tb, n, timeout, func(o *Options) { o.NoSharedMemory = off })
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			if want := !off && n > 1 && shm.Supported; (g.shm != nil) != want {
				tb.Fatalf("rank %d: shared memory in use = %v, want %v", i, g.shm != nil, want)
			}
			out[i] = g
		}
		return out
	}
}
