package reducer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goddp/ddp/internal/vec"
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
// about memory speed (vec.FiniteF32 and FiniteF64).
func Finite(t pg.Tensor) bool {
	switch t.Dtype {
	case pg.Float32:
		return vec.FiniteF32(pg.View[float32](t))
	case pg.Float64:
		return vec.FiniteF64(pg.View[float64](t))
	}
	return true
}
