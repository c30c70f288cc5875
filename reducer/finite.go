package reducer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/goddp/ddp/pg"
)

// ErrNonFinite: after an iteration, some averaged gradient holds a NaN or
// an infinity. Every rank holds the same averages, so every rank sees it
// at the same iteration without a collective of its own.
var ErrNonFinite = errors.New("reducer: the averaged gradients are not finite")

// NonFiniteError names the parameters whose averaged gradient holds a NaN
// or an infinity after a synchronised iteration (Options.CheckFinite). The
// iteration itself completed: the results are written back, the ranks are
// in step, and training may go on, for example by skipping this
// optimizer step as loss scaling does. It wraps ErrNonFinite.
type NonFiniteError struct {
	Iteration int      // the synchronised iteration, counted from 1
	Params    []int    // the parameters, ascending
	Names     []string // their names
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("%v at iteration %d: %s", ErrNonFinite, e.Iteration, strings.Join(e.Names, ", "))
}

func (e *NonFiniteError) Unwrap() error { return ErrNonFinite }

// checkFinite returns a NonFiniteError naming every parameter, used by some
// rank, whose result holds a NaN or an infinity; nil when all are finite.
func (r *Reducer) checkFinite(num int, usedByNone []bool) error {
	var bad []int
	for i := range r.params {
		if usedByNone != nil && usedByNone[i] {
			continue // untouched: not a result
		}
		if !Finite(r.tr.result(i)) {
			bad = append(bad, i)
		}
	}
	if bad == nil {
		return nil
	}
	e := &NonFiniteError{Iteration: num, Params: bad}
	for _, i := range bad {
		e.Names = append(e.Names, r.params[i].Name)
	}
	return e
}

// Finite reports whether every element of a float32 or float64 tensor is
// finite; tensors of other dtypes are finite. It reads the tensor once, at
// about memory speed, 64 bits at a time (finiteWords).
func Finite(t pg.Tensor) bool {
	b := t.Data
	switch t.Dtype {
	case pg.Float32:
		n := len(b) &^ 7
		if n < len(b) && (binary.NativeEndian.Uint32(b[n:])&0x7fffffff+0x00800000)&(1<<31) != 0 {
			return false // the odd last element
		}
		return finiteWords(b[:n], 0x7fffffff_7fffffff, 0x00800000_00800000, 1<<63|1<<31)
	case pg.Float64:
		return finiteWords(b, 0x7fffffff_ffffffff, 0x00100000_00000000, 1<<63)
	}
	return true
}

// finiteWords reads b as 64-bit words, each one float64 or two float32
// lanes. A lane's magnitude (w & abs) plus the lowest exponent bit (inc)
// reaches the lane's top bit exactly when its exponent is all ones, that
// is for an infinity or a NaN, and never carries into the next lane (the
// largest magnitude plus inc still fits in the lane). ORing those sums
// and testing the top bits (top) is integer work only, with four
// independent accumulators.
func finiteWords(b []byte, abs, inc, top uint64) bool {
	e := binary.NativeEndian
	var a0, a1, a2, a3 uint64
	for len(b) >= 32 {
		a0 |= e.Uint64(b)&abs + inc
		a1 |= e.Uint64(b[8:])&abs + inc
		a2 |= e.Uint64(b[16:])&abs + inc
		a3 |= e.Uint64(b[24:])&abs + inc
		b = b[32:]
	}
	for len(b) >= 8 {
		a0 |= e.Uint64(b)&abs + inc
		b = b[8:]
	}
	return (a0|a1|a2|a3)&top == 0
}
