package pg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestReduceOpCheck(t *testing.T) {
	for _, d := range pg.Dtypes() {
		for k := pg.Sum; k <= pg.PremulSum; k++ {
			bitwise := k == pg.Band || k == pg.Bor || k == pg.Bxor
			valid := !(bitwise && d.IsFloat()) && !(k == pg.PremulSum && !d.IsFloat())
			err := pg.ReduceOp{Kind: k}.Check(d)
			if valid != (err == nil) || err != nil && !errors.Is(err, pg.ErrInvalidArgument) {
				t.Errorf("%v on %v: got %v, want valid=%v", k, d, err, valid)
			}
		}
	}
	if err := pg.Op(pg.ReduceKind(42)).Check(pg.Float32); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("unknown op: %v", err)
	}
	if s := pg.PremulSumOp(0.5).String(); s != "PREMUL_SUM(0.5)" {
		t.Errorf("PremulSumOp(0.5) prints as %q", s)
	}
}

func TestChecks(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	sum := pg.Op(pg.Sum)
	for name, c := range map[string]struct {
		err   error
		valid bool
	}{
		"allreduce":                 {pg.CheckAllReduce(f32(3), sum), true},
		"allreduce BAND on float32": {pg.CheckAllReduce(f32(3), pg.Op(pg.Band)), false},
		"allreduce ragged":          {pg.CheckAllReduce(pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 5)}, sum), false},
		"broadcast":                 {pg.CheckBroadcast(f32(3), 1, 2), true},
		"broadcast root too big":    {pg.CheckBroadcast(f32(3), 2, 2), false},
		"broadcast root negative":   {pg.CheckBroadcast(f32(3), -1, 2), false},
		"allgather":                 {pg.CheckAllGather(f32(6), f32(3), 2), true},
		"allgather wrong size":      {pg.CheckAllGather(f32(5), f32(3), 2), false},
		"allgather wrong dtype":     {pg.CheckAllGather(pg.NewTensor(pg.Int32, 6), f32(3), 2), false},
		"reducescatter":             {pg.CheckReduceScatter(f32(3), f32(6), sum, 2), true},
		"reducescatter wrong size":  {pg.CheckReduceScatter(f32(3), f32(7), sum, 2), false},
		"reducescatter bad op":      {pg.CheckReduceScatter(f32(3), f32(6), pg.Op(pg.Bor), 2), false},
		"context":                   {pg.CheckContext(context.Background()), true},
		"nil context":               {pg.CheckContext(nilContext()), false},
	} {
		if c.valid != (c.err == nil) || c.err != nil && !errors.Is(c.err, pg.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want valid=%v", name, c.err, c.valid)
		}
	}
}

// nilContext is a nil context.Context, which the test passes on purpose.
func nilContext() context.Context { return nil }
