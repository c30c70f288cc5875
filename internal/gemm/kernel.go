package gemm

import "unsafe"

// The vector path. Which kernel runs, and how C is cut into tiles, depends
// only on m, n, k, the transposes and beta = 0, never on where the slices
// lie, so equal inputs give equal bits on every call: the tile kernel's
// elements are each one FMA chain in p order, and the dot kernel's lane
// sums follow a fixed tree that depends on k alone.

const (
	// maxRows is the tile kernel's most rows (its 12 accumulators are
	// maxRows rows of two vectors).
	maxRows = 6
	// dotMinK is the least k for which the A·Bᵀ case runs dot products of
	// rows; below it panels of Bᵀ feed the tile kernel, since short dot
	// products spend their time summing lanes (at k = 10 they took about 3×
	// the panels' time, and at k ≥ 84 the panels 1.3× to 8× the dots').
	dotMinK = 16
	// dotRows and dotCols are the dot kernel's tile.
	dotRows, dotCols = 3, 4
)

// product is F32 and F64 on the vector kernels; k > 0.
func product[T float](transA, transB bool, m, n, k int, alpha T, a []T, lda int,
	b []T, ldb int, beta T, c []T, ldc int) {
	if transB && !transA && k >= dotMinK {
		dots(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	rs, cs := lda, 1
	if transA {
		rs, cs = 1, lda
	}
	if transB {
		panels(m, n, k, alpha, a, rs, cs, b, ldb, beta, c, ldc)
		return
	}
	tiles(m, n, k, alpha, a, rs, cs, b, ldb, beta, c, ldc)
}

// lanes is how many T one 256-bit vector holds.
func lanes[T float]() int {
	var x T
	return 32 / int(unsafe.Sizeof(x))
}

// laneMask sets the int32 words of the first e elements of a 64-byte mask.
func laneMask[T float](mask *[16]int32, e int) {
	w := e * 8 / lanes[T]()
	for i := range w {
		mask[i] = -1
	}
}

// tiles runs the tile kernel over C: column blocks of two vectors outside,
// so that one block of B (k×2 vectors) stays in cache across the rows, and
// the last block masked when n is not a multiple of it.
func tiles[T float](m, n, k int, alpha T, a []T, rs, cs int, b []T, ldb int, beta T, c []T, ldc int) {
	nr := 2 * lanes[T]()
	var mask [16]int32
	laneMask[T](&mask, n%nr)
	for j := 0; j < n; j += nr {
		var mp *int32
		if j+nr > n {
			mp = &mask[0]
		}
		column(m, k, alpha, a, rs, cs, unsafe.Pointer(&b[j]), ldb, beta, c[j:], ldc, mp)
	}
}

// panels is tiles for op(B) = Bᵀ: each column block of Bᵀ is first copied
// into a k×2-vector panel, on the stack when k < dotMinK.
func panels[T float](m, n, k int, alpha T, a []T, rs, cs int, b []T, ldb int, beta T, c []T, ldc int) {
	nr := 2 * lanes[T]()
	var stack [16 * 16]T
	buf := stack[:]
	if k*nr > len(buf) {
		buf = make([]T, k*nr)
	}
	var mask [16]int32
	laneMask[T](&mask, n%nr)
	for j := 0; j < n; j += nr {
		w := min(nr, n-j)
		for q := range w {
			for p, v := range b[(j+q)*ldb : (j+q)*ldb+k] {
				buf[p*nr+q] = v
			}
		}
		var mp *int32
		if w < nr {
			mp = &mask[0]
		}
		column(m, k, alpha, a, rs, cs, unsafe.Pointer(&buf[0]), nr, beta, c[j:], ldc, mp)
	}
}

// column runs the tile kernel down one column block of C, whose B block
// starts at b with a stride of ldb elements.
func column[T float](m, k int, alpha T, a []T, rs, cs int, b unsafe.Pointer, ldb int, beta T, c []T, ldc int,
	mp *int32) {
	sz := 32 / lanes[T]()
	for i := 0; i < m; i += maxRows {
		rows := min(maxRows, m-i)
		tile(unsafe.Pointer(&a[i*rs]), rs*sz, cs*sz, b, ldb*sz, unsafe.Pointer(&c[i*ldc]), ldc*sz, k, rows, mp,
			float64(alpha), float64(beta), sz)
	}
}

// tile calls the tile kernel for elements of sz bytes; alpha and beta
// hold float32 values exactly when sz is 4.
func tile(a unsafe.Pointer, rs, cs int, b unsafe.Pointer, ldb int, c unsafe.Pointer, ldc int, k, rows int,
	mask *int32, alpha, beta float64, sz int) {
	if sz == 4 {
		tileF32((*float32)(a), rs, cs, (*float32)(b), ldb, (*float32)(c), ldc, k, rows, mask,
			float32(alpha), float32(beta), beta == 0)
		return
	}
	tileF64((*float64)(a), rs, cs, (*float64)(b), ldb, (*float64)(c), ldc, k, rows, mask, alpha, beta, beta == 0)
}

// dots computes C = alpha·A·Bᵀ + beta·C as dot products of A's and B's
// rows, both contiguous.
func dots[T float](m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	sz := 32 / lanes[T]()
	vecs := k / lanes[T]()
	var mask [16]int32
	var mp *int32
	if e := k % lanes[T](); e > 0 {
		laneMask[T](&mask, e)
		mp = &mask[0]
	}
	var out [dotRows * dotCols]T
	for i := 0; i < m; i += dotRows {
		rows := min(dotRows, m-i)
		for j := 0; j < n; j += dotCols {
			cols := min(dotCols, n-j)
			dot(unsafe.Pointer(&a[i*lda]), lda*sz, unsafe.Pointer(&b[j*ldb]), ldb*sz, vecs, rows, cols, mp,
				unsafe.Pointer(&out[0]), sz)
			for r := range rows {
				row := c[(i+r)*ldc+j : (i+r)*ldc+j+cols]
				for q := range row {
					v := alpha * out[dotCols*r+q]
					if beta != 0 {
						v += beta * row[q]
					}
					row[q] = v
				}
			}
		}
	}
}

// dot calls the dot kernel for elements of sz bytes.
func dot(a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, vecs, rows, cols int, mask *int32,
	out unsafe.Pointer, sz int) {
	if sz == 4 {
		dotF32((*float32)(a), lda, (*float32)(b), ldb, vecs, rows, cols, mask, (*float32)(out))
		return
	}
	dotF64((*float64)(a), lda, (*float64)(b), ldb, vecs, rows, cols, mask, (*float64)(out))
}
