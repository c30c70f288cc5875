package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
)

// digest hashes a data set's exact bytes.
func digest(d *Dataset) string {
	h := sha256.New()
	for _, v := range d.X {
		binary.Write(h, binary.LittleEndian, math.Float64bits(v))
	}
	for _, y := range d.Y {
		binary.Write(h, binary.LittleEndian, int64(y))
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

func TestSyntheticDeterministic(t *testing.T) {
	a, b := Synthetic(7, 500), Synthetic(7, 500)
	if digest(a) != digest(b) {
		t.Fatal("the same seed gave different data")
	}
	if c := Synthetic(8, 500); digest(c) == digest(a) || slices.Equal(c.Y, a.Y) {
		t.Error("seeds 7 and 8 gave the same data")
	}
	// A shorter set is a prefix of a longer one.
	short := Synthetic(7, 100)
	if !slices.Equal(short.X, a.X[:100*SyntheticD]) || !slices.Equal(short.Y, a.Y[:100]) {
		t.Error("Synthetic(7, 100) is not a prefix of Synthetic(7, 500)")
	}
	// Pinned bytes: a change here changes every default run's results.
	if got, want := digest(Synthetic(1, 256)), "3b0443aff62aadf6"; got != want {
		t.Errorf("Synthetic(1, 256) digest = %s, want %s; the generator changed", got, want)
	}
	if e := Synthetic(1, -3); e.N != 0 || len(e.X) != 0 || e.D != SyntheticD {
		t.Errorf("Synthetic(1, -3) = %+v, want an empty set", e)
	}
}

// The problem is balanced, has no linear signal in the class means, and is
// learnable: a nearest-neighbour classifier does far better than chance.
func TestSyntheticIsLearnable(t *testing.T) {
	train, test := Synthetic(1, 2000), Synthetic(2, 400)
	d := train.D
	counts := make([]int, train.Classes)
	means := make([][]float64, train.Classes)
	for k := range means {
		means[k] = make([]float64, d)
	}
	for i, y := range train.Y {
		counts[y]++
		for j := range d {
			means[y][j] += train.X[i*d+j]
		}
	}
	for k, c := range counts {
		if c < 400 || c > 600 {
			t.Errorf("class %d has %d of 2000 samples, want about 500", k, c)
		}
		norm := 0.0
		for j := range d {
			norm += (means[k][j] / float64(c)) * (means[k][j] / float64(c))
		}
		// The noise alone gives a mean of norm about sqrt(32/500) = 0.25;
		// a centre has norm about 0.6*sqrt(32) = 3.4.
		if math.Sqrt(norm) > 0.6 {
			t.Errorf("class %d has mean of norm %.2f, want about 0: the classes should differ only nonlinearly", k,
				math.Sqrt(norm))
		}
	}
	meanAcc, nnAcc := 0, 0
	for i, y := range test.Y {
		x := test.X[i*d : (i+1)*d]
		if nearest(x, means) == y {
			meanAcc++
		}
		if train.Y[nearestRow(x, train.X, d)] == y {
			nnAcc++
		}
	}
	t.Logf("nearest class mean: %d/400, nearest neighbour: %d/400", meanAcc, nnAcc)
	if meanAcc > 160 {
		t.Errorf("nearest class mean classifies %d/400; want near chance (100)", meanAcc)
	}
	if nnAcc < 240 {
		t.Errorf("nearest neighbour classifies %d/400; want well above chance", nnAcc)
	}
}

func nearest(x []float64, centres [][]float64) int {
	best, bestD := 0, math.Inf(1)
	for k, c := range centres {
		if dist := sqDist(x, c); dist < bestD {
			best, bestD = k, dist
		}
	}
	return best
}

func nearestRow(x, rows []float64, d int) int {
	best, bestD := 0, math.Inf(1)
	for i := 0; i*d < len(rows); i++ {
		if dist := sqDist(x, rows[i*d:(i+1)*d]); dist < bestD {
			best, bestD = i, dist
		}
	}
	return best
}

func sqDist(a, b []float64) float64 {
	s := 0.0
	for j := range a {
		s += (a[j] - b[j]) * (a[j] - b[j])
	}
	return s
}
