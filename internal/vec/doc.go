// Package vec holds the element-wise float kernels that the reduction and
// averaging paths spend their time in: dst += src, a three-input sum,
// scaling by a factor, and division by a divisor, for float32 and
// float64.
//
// Each kernel gives exactly the bits of the plain Go loop it replaces:
// every element is one IEEE operation (or, for Sum3, three, in the same
// order), and a vector lane rounds as the scalar instruction does. NaN
// operands keep the same priority (the destination's operand first), so
// even NaN payloads match. Only the speed differs: on amd64 with AVX the
// loops run eight float32 (four float64) lanes at a time and reach memory
// bandwidth, where Go's scalar loops run at a sixth of it; elsewhere they
// are the plain loops, unrolled.
//
//	vec.AddF32(dst, src)     // dst[i] += src[i]
//	vec.DivF32(grad, 4)      // grad[i] /= 4, as torch's div_ does
//
// Kernels panic if their slices differ in length, as copy's callers would
// want to know: the callers here always pass equal lengths.
package vec
