package backend_test

import (
	"context"
	"errors"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

func TestChecks(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	sum := pg.Op(pg.Sum)
	for name, c := range map[string]struct {
		err   error
		valid bool
	}{
		"allreduce":                 {backend.CheckAllReduce(f32(3), sum), true},
		"allreduce BAND on float32": {backend.CheckAllReduce(f32(3), pg.Op(pg.Band)), false},
		"allreduce ragged": {backend.CheckAllReduce(pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 5)}, sum),
			false},
		"broadcast":                {backend.CheckBroadcast(f32(3), 1, 2), true},
		"broadcast root too big":   {backend.CheckBroadcast(f32(3), 2, 2), false},
		"broadcast root negative":  {backend.CheckBroadcast(f32(3), -1, 2), false},
		"allgather":                {backend.CheckAllGather(f32(6), f32(3), 2), true},
		"allgather wrong size":     {backend.CheckAllGather(f32(5), f32(3), 2), false},
		"allgather wrong dtype":    {backend.CheckAllGather(pg.NewTensor(pg.Int32, 6), f32(3), 2), false},
		"reducescatter":            {backend.CheckReduceScatter(f32(3), f32(6), sum, 2), true},
		"reducescatter wrong size": {backend.CheckReduceScatter(f32(3), f32(7), sum, 2), false},
		"reducescatter bad op":     {backend.CheckReduceScatter(f32(3), f32(6), pg.Op(pg.Bor), 2), false},
		"context":                  {backend.CheckContext(context.Background()), true},
		"nil context":              {backend.CheckContext(nilContext()), false},
	} {
		if c.valid != (c.err == nil) || c.err != nil && !errors.Is(c.err, pg.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want valid=%v", name, c.err, c.valid)
		}
	}
}

// nilContext is a nil context.Context, which the test passes on purpose.
func nilContext() context.Context { return nil }

// pg's Future.Wait refuses a nil ctx itself (pg cannot import this
// package); its error is CheckContext's, word for word.
func TestCheckContextAgreesWithFutureWait(t *testing.T) {
	got := pg.NewFuture().Wait(nilContext())
	want := backend.CheckContext(nilContext())
	if got == nil || want == nil || got.Error() != want.Error() || !errors.Is(got, pg.ErrInvalidArgument) {
		t.Errorf("Future.Wait(nil) = %v, CheckContext(nil) = %v: want one ErrInvalidArgument", got, want)
	}
}
