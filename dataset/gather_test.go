package dataset

import (
	"math"
	"testing"
)

// pixelSet is an IDX-like data set of n samples of d pixels, every byte
// value among them.
func pixelSet(n, d int) *Dataset {
	ds := &Dataset{Pixels: make([]byte, n*d), Y: make([]int, n), N: n, D: d, Classes: 10}
	for i := range ds.Pixels {
		ds.Pixels[i] = byte(i*7 + i/251)
	}
	for i := range ds.Y {
		ds.Y[i] = i % 10
	}
	return ds
}

// TestGatherPixelsIsRow: the table Gather reads pixels through gives Row's
// quotients to the bit, for every byte value.
func TestGatherPixelsIsRow(t *testing.T) {
	ds := pixelSet(40, 300)
	idx := []int{39, 0, 17, 17, 5}
	x, y := make([]float64, len(idx)*ds.D), make([]int, len(idx))
	ds.Gather(idx, x, y)
	row := make([]float64, ds.D)
	seen := map[byte]bool{}
	for i, k := range idx {
		ds.Row(k, row)
		for j, want := range row {
			seen[ds.Pixels[k*ds.D+j]] = true
			if got := x[i*ds.D+j]; math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("sample %d feature %d: Gather gives %v, Row %v", k, j, got, want)
			}
		}
		if y[i] != ds.Y[k] {
			t.Fatalf("sample %d: label %d, want %d", k, y[i], ds.Y[k])
		}
	}
	if len(seen) != 256 {
		t.Fatalf("the samples hold %d of the 256 byte values; the test needs all", len(seen))
	}
}

// BenchmarkGather gathers a batch of 32 MNIST-sized images.
func BenchmarkGather(b *testing.B) {
	ds := pixelSet(1000, 784)
	idx := make([]int, 32)
	for i := range idx {
		idx[i] = i * 31 % ds.N
	}
	x, y := make([]float64, len(idx)*ds.D), make([]int, len(idx))
	b.ReportAllocs()
	for b.Loop() {
		ds.Gather(idx, x, y)
	}
}
