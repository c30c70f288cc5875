package pg_test

import (
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
