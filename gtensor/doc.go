// Package gtensor shows Gorgonia values as pg.Tensor and back, without
// copying: the one place where the Gorgonia engine meets the process
// groups, the reducer and the optimizers, which know no engine.
//
//	t, err := gtensor.TensorOf(node.Value()) // node's memory, as a pg.Tensor
//	g.AllReduce(ctx, t, pg.Op(pg.Avg))       // averages the value in place
//
// TensorOf views a value's memory, so writing the tensor writes the value;
// DenseOn goes the other way, a *tensor.Dense on a tensor's memory, and
// SameMemory says whether a Dense already is one. DtypeOf maps dtypes.
// Only float32 and float64 values convert: Gorgonia v0.9.18 computes in
// nothing else, and the reducer averages nothing else.
//
// It is a package of its own so that a package which needs only the
// conversion (optim) does not import the ddp wrapper, and the wrapper is
// left with the hooks and the gradients' bookkeeping.
package gtensor
