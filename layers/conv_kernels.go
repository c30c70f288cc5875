package layers

import "github.com/goddp/ddp/internal/gemm"

// convFloat is the element type of every convolution and pooling kernel.
type convFloat interface{ ~float32 | ~float64 }

// convGeom is one convolution's sizes: x [n,c,h,w], w [o,c,kh,kw], out
// [n,o,oh,ow]. Each sample's column matrix is k×p, k = c·kh·kw rows (one per
// filter tap, in w's memory order) and p = oh·ow columns (one per output
// position, in the output's memory order), so W[o,k]·col[k,p] is the
// sample's output in NCHW with no transpose.
type convGeom struct {
	n, c, h, w int
	o, kh, kw  int
	padH, padW int
	strH, strW int
	oh, ow     int
}

func (g convGeom) k() int     { return g.c * g.kh * g.kw }
func (g convGeom) p() int     { return g.oh * g.ow }
func (g convGeom) inLen() int { return g.c * g.h * g.w }

// convMM is gemm.F32 or gemm.F64, whichever T is.
func convMM[T convFloat](ta, tb bool, m, n, k int, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		gemm.F32(ta, tb, m, n, k, 1, a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		gemm.F64(ta, tb, m, n, k, 1, a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// validRange returns the output positions o in [0, outLen) whose input index
// o·stride + off falls inside [0, inLen): o in [lo, hi).
func validRange(off, stride, inLen, outLen int) (lo, hi int) {
	if off < 0 {
		lo = (-off + stride - 1) / stride
	}
	hi = outLen
	if last := (inLen - 1 - off); last < 0 {
		hi = 0
	} else if h := last/stride + 1; h < hi {
		hi = h
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// im2col writes one sample x [c,h,w] as its column matrix col [k,p]. Rows are
// filled whole (zeros where the tap reads padding), so col needs no clearing.
func im2col[T convFloat](g convGeom, x, col []T) {
	p := g.p()
	r := 0
	for ci := 0; ci < g.c; ci++ {
		plane := x[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				im2colRow(g, plane, col[r*p:(r+1)*p], ki, kj)
				r++
			}
		}
	}
}

// im2colRow fills the column-matrix row of tap (ki, kj) from one input plane.
func im2colRow[T convFloat](g convGeom, plane, row []T, ki, kj int) {
	offX := kj - g.padW
	xlo, xhi := validRange(offX, g.strW, g.w, g.ow)
	for oy := 0; oy < g.oh; oy++ {
		dst := row[oy*g.ow : (oy+1)*g.ow]
		iy := oy*g.strH - g.padH + ki
		if iy < 0 || iy >= g.h || xlo >= xhi {
			clear(dst)
			continue
		}
		clear(dst[:xlo])
		clear(dst[xhi:])
		src := plane[iy*g.w:]
		if g.strW == 1 {
			copy(dst[xlo:xhi], src[xlo+offX:xhi+offX])
			continue
		}
		for ox := xlo; ox < xhi; ox++ {
			dst[ox] = src[ox*g.strW+offX]
		}
	}
}

// col2im adds the column matrix col [k,p] back onto one sample dx [c,h,w],
// the adjoint of im2col; dx must be cleared first.
func col2im[T convFloat](g convGeom, col, dx []T) {
	p := g.p()
	r := 0
	for ci := 0; ci < g.c; ci++ {
		plane := dx[ci*g.h*g.w : (ci+1)*g.h*g.w]
		for ki := 0; ki < g.kh; ki++ {
			for kj := 0; kj < g.kw; kj++ {
				col2imRow(g, col[r*p:(r+1)*p], plane, ki, kj)
				r++
			}
		}
	}
}

func col2imRow[T convFloat](g convGeom, row, plane []T, ki, kj int) {
	offX := kj - g.padW
	xlo, xhi := validRange(offX, g.strW, g.w, g.ow)
	if xlo >= xhi {
		return
	}
	for oy := 0; oy < g.oh; oy++ {
		iy := oy*g.strH - g.padH + ki
		if iy < 0 || iy >= g.h {
			continue
		}
		src := row[oy*g.ow : (oy+1)*g.ow]
		dst := plane[iy*g.w:]
		if g.strW == 1 {
			d := dst[xlo+offX : xhi+offX]
			s := src[xlo:xhi]
			for i := range d {
				d[i] += s[i]
			}
			continue
		}
		for ox := xlo; ox < xhi; ox++ {
			dst[ox*g.strW+offX] += src[ox]
		}
	}
}

// convForward computes out = W·col + b per sample, keeping every sample's
// column matrix in cols (n·k·p) for the filter gradient. b may be nil.
func convForward[T convFloat](g convGeom, x, w, b, cols, out []T) {
	k, p := g.k(), g.p()
	for s := 0; s < g.n; s++ {
		col := cols[s*k*p : (s+1)*k*p]
		im2col(g, x[s*g.inLen():(s+1)*g.inLen()], col)
		y := out[s*g.o*p : (s+1)*g.o*p]
		var beta T
		if b != nil {
			for o := 0; o < g.o; o++ {
				row := y[o*p : (o+1)*p]
				for i := range row {
					row[i] = b[o]
				}
			}
			beta = 1
		}
		convMM(false, false, g.o, p, k, w, k, col, p, beta, y, p)
	}
}

// convFilterGrad computes dW = Σ_s dOut_s·col_sᵀ.
func convFilterGrad[T convFloat](g convGeom, dOut, cols, dw []T) {
	k, p := g.k(), g.p()
	for s := 0; s < g.n; s++ {
		var beta T
		if s > 0 {
			beta = 1
		}
		convMM(false, true, g.o, k, p, dOut[s*g.o*p:(s+1)*g.o*p], p, cols[s*k*p:(s+1)*k*p], p, beta, dw, k)
	}
	if g.n == 0 {
		clear(dw)
	}
}

// convBiasGrad computes db[o] = Σ over samples and positions of dOut.
func convBiasGrad[T convFloat](g convGeom, dOut, db []T) {
	p := g.p()
	clear(db)
	for s := 0; s < g.n; s++ {
		for o := 0; o < g.o; o++ {
			var acc T
			for _, v := range dOut[(s*g.o+o)*p : (s*g.o+o+1)*p] {
				acc += v
			}
			db[o] += acc
		}
	}
}

// convInputGrad computes dx_s = col2im(Wᵀ·dOut_s), with dcol (k·p) as scratch.
func convInputGrad[T convFloat](g convGeom, w, dOut, dcol, dx []T) {
	k, p := g.k(), g.p()
	clear(dx)
	for s := 0; s < g.n; s++ {
		convMM(true, false, k, p, g.o, w, k, dOut[s*g.o*p:(s+1)*g.o*p], p, 0, dcol, p)
		col2im(g, dcol, dx[s*g.inLen():(s+1)*g.inLen()])
	}
}
