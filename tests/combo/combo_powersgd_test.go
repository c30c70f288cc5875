package combo_test

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/goddp/ddp/commhook"
)

// powerRef is torch's PowerSGD (layer-wise) or batched PowerSGD, run
// serially over every rank's bucket.
type powerRef struct {
	o       commhook.PowerSGDOptions
	batched bool
	n       int
	shapes  [][]int                // per parameter
	errs    []map[string][]float64 // per rank: the error feedback, by parameter index or the bucket's indices
	qs      map[string][]float64   // the warm-start Qs, the same on every rank
}

// step returns the hook's result at iteration iter (the same on every
// rank) and the largest magnitude among it and the inputs.
func (p *powerRef) step(iter int, g [][][]float64, plan [][]int) (out [][]float64, scale []float64) {
	if iter < p.o.StartIter {
		all := make([]int, p.n)
		for r := range all {
			all[r] = r
		}
		return meanOf(g, all, p.n)
	}
	out, scale = make([][]float64, len(g[0])), make([]float64, len(g[0]))
	for _, bucket := range plan {
		if p.batched {
			p.bucket(iter, bucket, g, out, scale)
			continue
		}
		for _, i := range bucket {
			p.layer(iter, i, g, out, scale)
		}
	}
	return out, scale
}

// layer is PowerSGD on one parameter, viewed as a rows × (numel/rows)
// matrix; compressed only when (rows+cols)·r·MinCompressionRate <
// rows·cols, else averaged.
func (p *powerRef) layer(iter, i int, g [][][]float64, out [][]float64, scale []float64) {
	key := strconv.Itoa(i)
	work := p.withErrors(key, func(r int) []float64 { return g[r][i] }, len(g[0][i]))
	rows := p.shapes[i][0]
	cols := len(g[0][i]) / rows
	rk := min(rows, cols, p.o.MatrixApproximationRank)
	if float64((rows+cols)*rk)*p.o.MinCompressionRate < float64(rows*cols) {
		out[i] = p.lowRank(key, uint64(iter)<<32|uint64(uint32(i)), work, rows, cols, rk)
	} else { // the sum, divided after it
		out[i] = make([]float64, len(work[0]))
		for _, w := range work {
			for k, x := range w {
				out[i][k] += x
			}
		}
		for k := range out[i] {
			out[i][k] /= float64(p.n)
		}
	}
	p.keepErrors(key, work, out[i])
	scale[i] = max(maxAbs(work...), maxAbs(out[i]))
}

// bucket is batched PowerSGD on one bucket: its gradients end to end,
// zero-padded to an s×s matrix, s = ⌈√numel⌉.
func (p *powerRef) bucket(iter int, bucket []int, g [][][]float64, out [][]float64, scale []float64) {
	keys, numel := make([]string, len(bucket)), 0
	for j, i := range bucket {
		keys[j] = strconv.Itoa(i)
		numel += len(g[0][i])
	}
	key := strings.Join(keys, ",")
	s := int(math.Ceil(math.Sqrt(float64(numel))))
	work := p.withErrors(key, func(r int) []float64 {
		v := make([]float64, 0, s*s)
		for _, i := range bucket {
			v = append(v, g[r][i]...)
		}
		return v
	}, s*s)
	res := p.lowRank(key, uint64(iter)<<32|uint64(uint32(bucket[0])), work, s, s, min(p.o.MatrixApproximationRank, s))
	p.keepErrors(key, work, res)
	at := 0
	for _, i := range bucket {
		out[i] = res[at : at+len(g[0][i])]
		at += len(g[0][i])
		scale[i] = max(maxAbs(work...), maxAbs(res))
	}
}

// withErrors returns each rank's input, padded with zeros to length n,
// plus its error from the last compressed iteration.
func (p *powerRef) withErrors(key string, input func(r int) []float64, n int) [][]float64 {
	work := make([][]float64, p.n)
	for r := range work {
		work[r] = make([]float64, n)
		copy(work[r], input(r))
		if e, ok := p.errs[r][key]; ok && p.o.UseErrorFeedback {
			for k := range work[r] {
				work[r][k] += e[k]
			}
		}
	}
	return work
}

// keepErrors keeps each rank's error: its input minus the result.
func (p *powerRef) keepErrors(key string, work [][]float64, res []float64) {
	if !p.o.UseErrorFeedback {
		return
	}
	for r, w := range work {
		e := make([]float64, len(w))
		for k := range w {
			e[k] = w[k] - res[k]
		}
		p.errs[r][key] = e
	}
}

// lowRank is one power step on the rows×cols matrices work[r]: Q (the
// last one with warm start, else drawn from the stream), orthogonalized;
// P = Σ M·Q, orthogonalized; Q = Σ Mᵀ·P / n; the result P·Qᵀ.
func (p *powerRef) lowRank(key string, stream uint64, work [][]float64, rows, cols, rk int) []float64 {
	q, ok := p.qs[key]
	if ok && p.o.WarmStart {
		q = append([]float64(nil), q...)
	} else {
		rng := rand.New(rand.NewPCG(p.o.RandomSeed, stream))
		q = make([]float64, cols*rk)
		for k := range q {
			q[k] = rng.NormFloat64()
		}
	}
	eps := p.o.OrthogonalizationEpsilon
	gramSchmidt(q, cols, rk, eps)
	pm := make([]float64, rows*rk)
	for _, m := range work {
		for i := range rows {
			for c := range rk {
				for j := range cols {
					pm[i*rk+c] += m[i*cols+j] * q[j*rk+c]
				}
			}
		}
	}
	gramSchmidt(pm, rows, rk, eps)
	q = make([]float64, cols*rk)
	for _, m := range work {
		for i := range rows {
			for c := range rk {
				for j := range cols {
					q[j*rk+c] += m[i*cols+j] * pm[i*rk+c]
				}
			}
		}
	}
	for k := range q {
		q[k] /= float64(p.n)
	}
	if p.o.WarmStart {
		p.qs[key] = q
	}
	res := make([]float64, rows*cols)
	for i := range rows {
		for j := range cols {
			for c := range rk {
				res[i*cols+j] += pm[i*rk+c] * q[j*rk+c]
			}
		}
	}
	return res
}

// gramSchmidt makes the r columns of the row-major n×r matrix a
// orthonormal: each column divided by its norm (plus eps), a zero column
// left at zero, its projection taken out of the later columns.
func gramSchmidt(a []float64, n, r int, eps float64) {
	for c := range r {
		ss := 0.0
		for i := range n {
			ss += a[i*r+c] * a[i*r+c]
		}
		norm := math.Sqrt(ss) + eps
		for i := range n {
			if norm == 0 {
				a[i*r+c] = 0
			} else {
				a[i*r+c] /= norm
			}
		}
		for d := c + 1; d < r; d++ {
			proj := 0.0
			for i := range n {
				proj += a[i*r+c] * a[i*r+d]
			}
			for i := range n {
				a[i*r+d] -= proj * a[i*r+c]
			}
		}
	}
}
