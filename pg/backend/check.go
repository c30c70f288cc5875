package backend

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// The Check functions validate a collective's arguments. Backends call
// them before doing any work, so every backend rejects the same inputs
// with the same errors. They refuse device tensors with pg.ErrDeviceTensor
// unless given AcceptDevice, and with it refuse a call mixing host and
// device tensors.

// CheckContext refuses a nil ctx, which every method that takes one
// would otherwise panic on. Backends call it before taking any lock or
// sequence number, so a nil ctx fails the call alone (see Bad calls in
// package pg's documentation).
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context.Context; pass context.Background() or one with a deadline", pg.ErrInvalidArgument)
	}
	return nil
}

// CheckAllReduce validates AllReduce's arguments.
func CheckAllReduce(t pg.Tensor, op pg.ReduceOp, opts ...CheckOption) error {
	if err := checkPlace("allreduce", opts, t); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	return op.Check(t.Dtype)
}

// CheckBroadcast validates Broadcast's arguments for a group of size ranks.
func CheckBroadcast(t pg.Tensor, root, size int, opts ...CheckOption) error {
	if err := checkPlace("broadcast", opts, t); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if root < 0 || root >= size {
		return fmt.Errorf("%w: broadcast root %d is not a rank of a group of size %d", pg.ErrInvalidArgument, root, size)
	}
	return nil
}

// CheckAllGather validates AllGather's arguments.
func CheckAllGather(out, in pg.Tensor, size int, opts ...CheckOption) error {
	if err := checkPlace("allgather", opts, out, in); err != nil {
		return err
	}
	if err := in.Validate(); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if out.Dtype != in.Dtype {
		return fmt.Errorf("%w: allgather output is %v but input is %v", pg.ErrInvalidArgument, out.Dtype, in.Dtype)
	}
	if out.Len() != size*in.Len() {
		return fmt.Errorf("%w: allgather output holds %d elements, want size*input = %d*%d", pg.ErrInvalidArgument, out.Len(),
			size, in.Len())
	}
	return nil
}

// CheckReduceScatter validates ReduceScatter's arguments.
func CheckReduceScatter(out, in pg.Tensor, op pg.ReduceOp, size int, opts ...CheckOption) error {
	if err := checkPlace("reducescatter", opts, out, in); err != nil {
		return err
	}
	if err := in.Validate(); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if out.Dtype != in.Dtype {
		return fmt.Errorf("%w: reducescatter output is %v but input is %v", pg.ErrInvalidArgument, out.Dtype, in.Dtype)
	}
	if in.Len() != size*out.Len() {
		return fmt.Errorf("%w: reducescatter input holds %d elements, want size*output = %d*%d", pg.ErrInvalidArgument,
			in.Len(), size, out.Len())
	}
	return op.Check(in.Dtype)
}
