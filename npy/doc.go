// Package npy reads and writes NumPy .npy files, the format np.save and
// np.load use, so that goddp can exchange data sets and parameters with
// PyTorch and NumPy programs.
//
// Read accepts format versions 1.0, 2.0 and 3.0 of simple (non-structured)
// arrays stored in C order with little-endian or byte-order-free ('|')
// dtypes: <f4 <f8, <i1 <i2 <i4 <i8, |u1 <u2 <u4 <u8, |i1 and |b1.
// Fortran order, big-endian data, structured dtypes and pickled objects are
// errors that say how to re-save the array. The header dictionary is parsed
// by a small hand-written parser of the Python literal numpy writes; it is
// capped at MaxHeaderLen bytes, and the data must be exactly as long as the
// shape and dtype say. ReadHeader and ReadData split Read in two, so that
// a caller can check the shape before any data is read. Memory follows
// the data that arrives, never the size a header claims: a small gzip
// stream that declares gigabytes costs what it holds.
//
// Write produces the same bytes as numpy's np.save for float32, float64,
// int32 and int64 slices (version 1.0 header, padded with spaces to a
// multiple of 64 bytes). WriteFile is atomic: readers see the old file or the
// whole new one, never part of it.
//
//	a, err := npy.ReadFile("X.npy") // a.Shape == []int{N, D}, a.Descr == "<f4"
//	x, err := a.Float64s()          // row-major, len N*D
//	err = npy.WriteFile("fc1.weight.npy", []int{in, out}, w) // w []float64
package npy
