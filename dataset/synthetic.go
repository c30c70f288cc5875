package dataset

import "math/rand/v2"

// The synthetic problem. See Synthetic.
const (
	SyntheticD       = 32  // features per sample
	SyntheticClasses = 4   // classes
	syntheticScale   = 0.6 // length of a centre's coordinates, in units of the noise
)

// PCG seeds of the synthetic generator: the centres are fixed, the
// samples depend on the caller's seed.
const (
	centreSeed1, centreSeed2 = 0x676f646470, 0x63656e74726573 // "goddp", "centres"
	sampleStream             = 0x73616d706c6573               // "samples"
)

// Synthetic returns n samples of goddp's built-in classification problem:
// SyntheticD = 32 features and SyntheticClasses = 4 classes, each class two
// Gaussian blobs at opposite points +c and −c. Every class has mean zero,
// so a linear model does no better than chance, while a small MLP learns
// the problem (about 90% is attainable) within tens of steps. The same seed
// gives the same bytes on every platform, and different seeds give
// independent samples of the same problem (so Synthetic(seed+1, m) is a
// fair test set for Synthetic(seed, n)).
//
// The exact generator, with r.Norm = r.NormFloat64() of math/rand/v2:
//
//	r := rand.New(rand.NewPCG(0x676f646470, 0x63656e74726573))
//	for k := 0..3, j := 0..31:  c[k][j] = 0.6 * r.Norm()
//	r = rand.New(rand.NewPCG(seed, 0x73616d706c6573))
//	for i := 0..n-1:
//	    y[i] = r.IntN(4)
//	    s := +1 if r.IntN(2) == 0, else −1
//	    for j := 0..31:  x[i][j] = (s * c[y[i]][j]) + r.Norm()
//
// The product is rounded before the sum (no fused multiply-add), so the
// result is the same on every architecture. A negative n counts as 0.
func Synthetic(seed uint64, n int) *Dataset {
	n = max(n, 0)
	const d, classes = SyntheticD, SyntheticClasses
	var centres [classes][d]float64
	r := rand.New(rand.NewPCG(centreSeed1, centreSeed2))
	for k := range centres {
		for j := range centres[k] {
			centres[k][j] = syntheticScale * r.NormFloat64()
		}
	}
	ds := &Dataset{
		X: make([]float64, n*d), Y: make([]int, n),
		N: n, D: d, Classes: classes, Shape: []int{d},
	}
	r = rand.New(rand.NewPCG(seed, sampleStream))
	for i := range n {
		y := r.IntN(classes)
		sign := 1.0
		if r.IntN(2) != 0 {
			sign = -1
		}
		row := ds.X[i*d : (i+1)*d]
		for j := range row {
			row[j] = float64(sign*centres[y][j]) + r.NormFloat64()
		}
		ds.Y[i] = y
	}
	return ds
}
