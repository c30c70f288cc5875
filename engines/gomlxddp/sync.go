package gomlxddp

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Note [rank 0's variables]
//
// GoMLX initialisers draw from the context's random seed, which differs
// between processes unless the user sets it, and a checkpoint may be
// loaded on rank 0 only. So after the first graphs are built (which
// creates the model's and the optimizer's variables) and the variables
// are initialised, every variable of the context, trainable or not and
// of any dtype, is copied from rank 0 to every rank: first a digest of
// the variables' names, dtypes and shapes is compared with one allreduce,
// so that ranks with different models fail together instead of hanging in
// a broadcast of different sizes; then all values travel in one
// broadcast of bytes. After that every step applies the same averaged
// gradients with the same compiled graph, so the replicas stay bitwise
// identical (VerifyReplicas checks it).

// variables lists the context's variables by scope and name: the
// context's own order is the order of creation, which differs between a
// rank that loaded a checkpoint and one that did not.
func variables(mctx *mlctx.Context) []*mlctx.Variable {
	var vs []*mlctx.Variable
	for v := range mctx.IterVariables() {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b *mlctx.Variable) int { return strings.Compare(a.ScopeAndName(), b.ScopeAndName()) })
	return vs
}

// ensureRNGState gives the context its random-number state if it has
// none yet: GoMLX creates it while initialising variables, so a rank
// whose variables all came from a checkpoint lacks it, and the ranks
// would hold different sets of variables.
func ensureRNGState(mctx *mlctx.Context) error {
	v := mctx.GetVariableByScopeAndName(mlctx.RootScope, mlctx.RNGStateVariableName)
	if v != nil && v.HasValue() {
		return nil
	}
	return mctx.ResetRNGState()
}

// untrainRNGState marks a random state loaded from a checkpoint as not
// trainable: GoMLX's loader hands back every variable it loads as
// trainable, and its random ops take the state as it is, so on the rank
// that loaded a checkpoint a model with random ops would otherwise count
// the uint64 state among its parameters, and the other ranks would not.
func untrainRNGState(mctx *mlctx.Context) {
	if v := mctx.GetVariableByScopeAndName(mlctx.RootScope, mlctx.RNGStateVariableName); v != nil {
		v.SetTrainable(false)
	}
}

// broadcastVariables copies rank 0's values of vs to every rank. It is
// collective, and vs must describe the same variables on every rank.
func broadcastVariables(ctx context.Context, g pg.ProcessGroup, vs []*mlctx.Variable) error {
	return broadcastVariablesFrom(ctx, g, vs, 0)
}

// broadcastVariablesFrom is broadcastVariables from rank root.
func broadcastVariablesFrom(ctx context.Context, g pg.ProcessGroup, vs []*mlctx.Variable, root int) error {
	if err := checkSameVariables(ctx, g, vs); err != nil {
		return err
	}
	size := 0
	for _, v := range vs {
		size += int(v.Shape().Memory())
	}
	buf := pg.NewTensor(pg.Uint8, size)
	if g.Rank() == root {
		if err := packVariables(buf.Data, vs); err != nil {
			return err
		}
	}
	if err := g.Broadcast(ctx, buf, root).Wait(ctx); err != nil {
		return fmt.Errorf("gomlxddp: broadcasting rank %d's variables: %w", root, err)
	}
	if g.Rank() == root {
		return nil
	}
	return unpackVariables(buf.Data, vs)
}

func packVariables(buf []byte, vs []*mlctx.Variable) error {
	off := 0
	for _, v := range vs {
		val, err := v.Value()
		if err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
		err = val.ConstBytes(func(data []byte) { off += copy(buf[off:], data) })
		if err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

func unpackVariables(buf []byte, vs []*mlctx.Variable) error {
	off := 0
	for _, v := range vs {
		t := tensors.FromShape(v.Shape())
		err := t.MutableBytes(func(data []byte) { off += copy(data, buf[off:]) })
		if err == nil {
			err = v.SetValue(t)
		}
		if err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

// checkSameVariables fails on every rank when some rank's variables
// differ in name, dtype or shape from another's.
func checkSameVariables(ctx context.Context, g pg.ProcessGroup, vs []*mlctx.Variable) error {
	h := fnv.New64a()
	for _, v := range vs {
		fmt.Fprintf(h, "%s|%s;", v.ScopeAndName(), v.Shape())
	}
	d := int64(h.Sum64() >> 2) // positive, so that its negation is too
	words := []int64{d, -d}
	if err := g.AllReduce(ctx, pg.Int64s(words), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return fmt.Errorf("gomlxddp: comparing the ranks' variables: %w", err)
	}
	if words[0] != d || words[1] != -d {
		return fmt.Errorf("gomlxddp: the ranks' contexts hold different variables (names, dtypes or shapes); every rank "+
			"must build the same model, with the same optimizer (rank %d has %d variables)", g.Rank(), len(vs))
	}
	return nil
}

// copyOut copies a GoMLX tensor's bytes into a host tensor of the same size.
func copyOut(dst pg.Tensor, src *tensors.Tensor) error {
	var n int
	err := src.ConstBytes(func(data []byte) {
		n = len(data)
		if n == len(dst.Data) {
			copy(dst.Data, data)
		}
	})
	if err == nil && n != len(dst.Data) {
		err = fmt.Errorf("%d bytes where %d were expected", n, len(dst.Data))
	}
	return err
}

// addOut adds a GoMLX tensor's values into a host tensor of the same
// size and dtype.
func addOut(dst pg.Tensor, src *tensors.Tensor) error {
	var err error
	if e := src.ConstBytes(func(data []byte) {
		err = backend.Add(dst,
			pg.Tensor{Dtype: dst.Dtype, Data: data})
	}); e != nil {
		return e
	}
	return err
}

// copyIn copies a host tensor's bytes into a GoMLX tensor of the same size.
func copyIn(dst *tensors.Tensor, src pg.Tensor) error {
	var n int
	err := dst.MutableBytes(func(data []byte) {
		n = len(data)
		if n == len(src.Data) {
			copy(data, src.Data)
		}
	})
	if err == nil && n != len(src.Data) {
		err = fmt.Errorf("%d bytes where %d were expected", n, len(src.Data))
	}
	return err
}

// scalar reads a scalar float tensor (the loss) as a float64.
func scalar(t *tensors.Tensor) (float64, error) {
	var v any
	err := catch(func() error { v = t.Value(); return nil })
	if err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("gomlxddp: the loss is a %T, want float32 or float64", v)
}

// catch runs fn, turning a panic (GoMLX reports graph-building errors by
// panicking) into an error.
func catch(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(error); ok {
				err = e
				return
			}
			err = fmt.Errorf("%v", p)
		}
	}()
	return fn()
}

func args(inputs, labels []*tensors.Tensor) []any {
	out := make([]any, 0, len(inputs)+len(labels))
	for _, t := range inputs {
		out = append(out, t)
	}
	for _, t := range labels {
		out = append(out, t)
	}
	return out
}

func anys(ts []*tensors.Tensor) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

func finalizeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		if t != nil {
			_ = t.FinalizeAll()
		}
	}
}
