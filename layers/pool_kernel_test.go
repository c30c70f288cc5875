package layers

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxPool2x2MatchesScan runs the branch-free 2×2 kernel and the scan in
// window order on planes drawn from values that stress it (ties, ±0, ±Inf,
// NaN): the same argmax and the same bits everywhere.
func TestMaxPool2x2MatchesScan(t *testing.T) {
	special := []float64{math.Inf(-1), -1, math.Copysign(0, -1), 0, 1, 2, math.Inf(1), math.NaN(), 1e-320, -1e-320}
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range []poolGeom{
		{n: 3, c: 2, h: 6, w: 6, kh: 2, kw: 2, strH: 2, strW: 2},
		{n: 2, c: 1, h: 7, w: 5, kh: 2, kw: 2, strH: 1, strW: 1},
		{n: 1, c: 3, h: 5, w: 9, kh: 2, kw: 2, strH: 3, strW: 2},
	} {
		g.oh, g.ow = (g.h-2)/g.strH+1, (g.w-2)/g.strW+1
		for range 200 {
			x := make([]float64, g.planes()*g.h*g.w)
			for i := range x {
				x[i] = special[r.IntN(len(special))]
			}
			check2x2(t, g, x)
			x32 := make([]float32, len(x))
			for i, v := range x {
				x32[i] = float32(v)
			}
			check2x2(t, g, x32)
		}
	}
}

func check2x2[T convFloat](t *testing.T, g poolGeom, x []T) {
	t.Helper()
	n := g.planes() * g.oh * g.ow
	out, arg := make([]T, n), make([]int32, n)
	maxPool2x2(g, x, out, arg)
	hw, ohw := g.h*g.w, g.oh*g.ow
	for pl := range g.planes() {
		xp := x[pl*hw : (pl+1)*hw]
		for oy := range g.oh {
			for ox := range g.ow {
				j := pl*ohw + oy*g.ow + ox
				want := maxScan(xp, oy*g.strH*g.w+ox*g.strW, g.w, 2, 2)
				if int(arg[j]) != want || math.Float64bits(float64(out[j])) != math.Float64bits(float64(xp[want])) {
					t.Fatalf("window %d of %v: argmax %d value %v, the scan's %d %v", j, xp, arg[j], out[j], want,
						xp[want])
				}
			}
		}
	}
}
