package ddp_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/tcp"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Bad options and bad environments fail at once, saying what to do.
func TestInitProcessGroupRefusals(t *testing.T) {
	ctx := context.Background()
	one := &env.Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 1}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		o    ddp.InitOptions
		is   error
		want string
	}{
		{"nil context", nil, ddp.InitOptions{Env: one}, pg.ErrInvalidArgument, "nil context"},
		{"unknown backend", ctx, ddp.InitOptions{Env: one, Backend: "gloo"}, pg.ErrInvalidArgument, "want tcp, nccl or mpi"},
		{"mpi without -tags mpi", ctx, ddp.InitOptions{Backend: "mpi"}, ddp.ErrBackendUnavailable, "-tags mpi"},
		{"no master address", ctx, ddp.InitOptions{Lookup: lookupOf(map[string]string{"RANK": "1", "WORLD_SIZE": "2"})},
			pg.ErrInvalidArgument, "MASTER_ADDR is not set"},
		{"no NCCL", ctx, ddp.InitOptions{Env: one, Backend: "nccl", Lookup: lookupOf(
			map[string]string{"GODDP_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})},
			ddp.ErrBackendUnavailable, "GODDP_NCCL_LIBRARY"},
		{"NCCL timing not a boolean", ctx,
			ddp.InitOptions{Env: one, Backend: "nccl",
				Lookup: lookupOf(map[string]string{"TORCH_NCCL_ENABLE_TIMING": "sometimes"})},
			pg.ErrInvalidArgument, `TORCH_NCCL_ENABLE_TIMING="sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ddp.InitProcessGroup(tc.ctx, tc.o)
			if g != nil {
				g.Close()
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %v saying %q", err, tc.is, tc.want)
			}
		})
	}
}

// Two ranks of one job, each told its place (as a launcher's environment
// would): rank 0 hosts the store, both join the tcp group, the group's
// Store outlives nothing it should, and an allreduce sums.
func TestInitProcessGroupTwoRanks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port := freePort(t)
	secret := []byte("init-process-group-test-secret-0123")
	gs := make([]*ddp.Group, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		e := env.Config{Rank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port,
			Secret: secret, Source: env.SourceTorchrun}
		wg.Go(func() {
			gs[r], errs[r] = ddp.InitProcessGroup(ctx,
				ddp.InitOptions{Env: &e, Timeout: 20 * time.Second, TCP: tcp.Options{NoSharedMemory: r == 1}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, g := range gs {
		if g.StoreHost() != 0 || g.Store() == nil || g.Env().Rank != r {
			t.Errorf("rank %d: StoreHost %d, Store %v, Env rank %d", r, g.StoreHost(), g.Store(), g.Env().Rank)
		}
		var tg *tcp.Group
		if !pg.As(g, &tg) {
			t.Errorf("rank %d: pg.As finds no *tcp.Group behind the ddp.Group", r)
		}
	}
	for r, g := range gs {
		wg.Go(func() {
			x := []float64{float64(r + 1)}
			errs[r] = g.AllReduce(ctx, pg.Float64s(x), pg.Op(pg.Sum)).Wait(ctx)
			if errs[r] == nil && x[0] != 3 {
				errs[r] = errors.New("wrong sum")
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
