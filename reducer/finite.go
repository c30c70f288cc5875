package reducer

import (
	"errors"
	"fmt"
	"math"
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
		v := r.layout.view(i)
		if r.mixed != nil {
			v = r.mixed.master[i]
		}
		if !Finite(v) {
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
// about memory speed: x·0 is 0 for every finite x and NaN for a NaN or an
// infinity, and a NaN survives any sum.
func Finite(t pg.Tensor) bool {
	switch t.Dtype {
	case pg.Float32:
		return finite(pg.View[float32](t))
	case pg.Float64:
		return finite(pg.View[float64](t))
	}
	return true
}

func finite[T float32 | float64](v []T) bool {
	var s0, s1, s2, s3 T
	for len(v) >= 4 {
		s0 += v[0] * 0
		s1 += v[1] * 0
		s2 += v[2] * 0
		s3 += v[3] * 0
		v = v[4:]
	}
	for _, x := range v {
		s0 += x * 0
	}
	s := s0 + s1 + s2 + s3
	return !math.IsNaN(float64(s))
}
