package backend

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

func checkRoot(what string, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("%w: %s root %d is not a rank of a group of size %d", pg.ErrInvalidArgument, what, root, size)
	}
	return nil
}

func checkSameDtype(what string, out, in pg.Tensor) error {
	if err := in.Validate(); err != nil {
		return err
	}
	if err := out.Validate(); err != nil {
		return err
	}
	if out.Dtype != in.Dtype {
		return fmt.Errorf("%w: %s output is %v but input is %v", pg.ErrInvalidArgument, what, out.Dtype, in.Dtype)
	}
	return nil
}

// CheckReduce validates Reduce's arguments.
func CheckReduce(t pg.Tensor, root int, op pg.ReduceOp, size int, opts ...CheckOption) error {
	if err := checkPlace("reduce", opts, t); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if err := checkRoot("reduce", root, size); err != nil {
		return err
	}
	return op.Check(t.Dtype)
}

// CheckGather validates Gather's arguments on rank rank.
func CheckGather(out, in pg.Tensor, root, rank, size int, opts ...CheckOption) error {
	if err := checkRoot("gather", root, size); err != nil {
		return err
	}
	if rank != root {
		if err := checkPlace("gather", opts, in); err != nil {
			return err
		}
		return in.Validate()
	}
	if err := checkPlace("gather", opts, out, in); err != nil {
		return err
	}
	if err := checkSameDtype("gather", out, in); err != nil {
		return err
	}
	if out.Len() != size*in.Len() {
		return fmt.Errorf("%w: gather output on root %d holds %d elements, want size*input = %d*%d", pg.ErrInvalidArgument,
			root, out.Len(), size, in.Len())
	}
	return nil
}

// CheckScatter validates Scatter's arguments on rank rank.
func CheckScatter(out, in pg.Tensor, root, rank, size int, opts ...CheckOption) error {
	if err := checkRoot("scatter", root, size); err != nil {
		return err
	}
	if rank != root {
		if err := checkPlace("scatter", opts, out); err != nil {
			return err
		}
		return out.Validate()
	}
	if err := checkPlace("scatter", opts, out, in); err != nil {
		return err
	}
	if err := checkSameDtype("scatter", out, in); err != nil {
		return err
	}
	if in.Len() != size*out.Len() {
		return fmt.Errorf("%w: scatter input on root %d holds %d elements, want size*output = %d*%d", pg.ErrInvalidArgument,
			root, in.Len(), size, out.Len())
	}
	return nil
}

// CheckAllToAll validates AllToAll's arguments and returns the splits to
// use: the given ones, or equal chunks when both are nil.
func CheckAllToAll(out, in pg.Tensor, outSplits, inSplits []int, size int, opts ...CheckOption) (outS, inS []int,
	err error) {
	if err := checkPlace("alltoall", opts, out, in); err != nil {
		return nil, nil, err
	}
	if err := checkSameDtype("alltoall", out, in); err != nil {
		return nil, nil, err
	}
	split := func(name string, s []int, t pg.Tensor) ([]int, error) {
		if s == nil {
			if t.Len()%size != 0 {
				return nil, fmt.Errorf("%w: alltoall %s holds %d elements, not a multiple of the group size %d; pass split sizes",
					pg.ErrInvalidArgument, name, t.Len(), size)
			}
			eq := make([]int, size)
			for i := range eq {
				eq[i] = t.Len() / size
			}
			return eq, nil
		}
		if len(s) != size {
			return nil, fmt.Errorf("%w: alltoall %s split sizes have %d entries, want one per rank (%d)", pg.ErrInvalidArgument,
				name, len(s), size)
		}
		sum := 0
		for i, n := range s {
			if n < 0 {
				return nil, fmt.Errorf("%w: alltoall %s split size %d for rank %d is negative", pg.ErrInvalidArgument, name, n, i)
			}
			sum += n
		}
		if sum != t.Len() {
			return nil, fmt.Errorf("%w: alltoall %s split sizes sum to %d but the tensor holds %d elements",
				pg.ErrInvalidArgument, name, sum, t.Len())
		}
		return s, nil
	}
	if outS, err = split("output", outSplits, out); err != nil {
		return nil, nil, err
	}
	if inS, err = split("input", inSplits, in); err != nil {
		return nil, nil, err
	}
	return outS, inS, nil
}

// CheckPeer validates a Send or Recv peer and tag on rank rank.
func CheckPeer(what string, t pg.Tensor, peer, tag, rank, size int, opts ...CheckOption) error {
	if err := checkPlace(what, opts, t); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if peer < 0 || peer >= size {
		return fmt.Errorf("%w: %s peer %d is not a rank of a group of size %d", pg.ErrInvalidArgument, what, peer, size)
	}
	if peer == rank {
		return fmt.Errorf("%w: %s to or from itself (rank %d); copy the tensor instead", pg.ErrInvalidArgument, what, rank)
	}
	if tag < 0 {
		return fmt.Errorf("%w: %s tag %d is negative", pg.ErrInvalidArgument, what, tag)
	}
	return nil
}

// CheckCoalesced validates the tensor lists of a coalesced collective:
// outs may be nil (AllReduceCoalesced); otherwise it pairs with ins.
func CheckCoalesced(what string, outs, ins []pg.Tensor, opts ...CheckOption) error {
	if outs != nil && len(outs) != len(ins) {
		return fmt.Errorf("%w: %s has %d outputs for %d inputs", pg.ErrInvalidArgument, what, len(outs), len(ins))
	}
	if err := checkPlace(what, opts, append(append([]pg.Tensor(nil), outs...), ins...)...); err != nil {
		return err
	}
	for i, t := range ins {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("%s tensor %d: %w", what, i, err)
		}
	}
	return nil
}

// CheckNewGroup validates new_group's ranks for a parent of size size and
// returns this rank's index in them, or -1.
func CheckNewGroup(ranks []int, rank, size int) (int, error) {
	if len(ranks) == 0 {
		return -1, fmt.Errorf("%w: new group with no ranks", pg.ErrInvalidArgument)
	}
	seen := make(map[int]bool, len(ranks))
	me := -1
	for i, r := range ranks {
		if r < 0 || r >= size {
			return -1, fmt.Errorf("%w: new group rank %d is not a rank of the parent group of size %d", pg.ErrInvalidArgument, r,
				size)
		}
		if seen[r] {
			return -1, fmt.Errorf("%w: new group lists rank %d twice", pg.ErrInvalidArgument, r)
		}
		seen[r] = true
		if r == rank {
			me = i
		}
	}
	return me, nil
}

// CheckAllReduceCoalesced validates AllReduceCoalesced's arguments: the
// list, then every tensor as CheckAllReduce does.
func CheckAllReduceCoalesced(ts []pg.Tensor, op pg.ReduceOp, opts ...CheckOption) error {
	const what = "allreduce_coalesced"
	if err := CheckCoalesced(what, nil, ts, opts...); err != nil {
		return err
	}
	return eachPair(what, nil, ts, func(_, t pg.Tensor) error { return CheckAllReduce(t, op, opts...) })
}

// CheckAllGatherCoalesced validates AllGatherCoalesced's arguments: the
// lists, then every pair as CheckAllGather does.
func CheckAllGatherCoalesced(outs, ins []pg.Tensor, size int, opts ...CheckOption) error {
	const what = "allgather_coalesced"
	if err := checkPairedLists(what, outs, ins, opts); err != nil {
		return err
	}
	return eachPair(what, outs, ins, func(out, in pg.Tensor) error { return CheckAllGather(out, in, size, opts...) })
}

// CheckReduceScatterCoalesced validates ReduceScatterCoalesced's
// arguments: the lists, then every pair as CheckReduceScatter does.
func CheckReduceScatterCoalesced(outs, ins []pg.Tensor, op pg.ReduceOp, size int, opts ...CheckOption) error {
	const what = "reducescatter_coalesced"
	if err := checkPairedLists(what, outs, ins, opts); err != nil {
		return err
	}
	return eachPair(what, outs, ins,
		func(out, in pg.Tensor) error { return CheckReduceScatter(out, in, op, size, opts...) })
}

// checkPairedLists is CheckCoalesced for collectives that need an output
// per input.
func checkPairedLists(what string, outs, ins []pg.Tensor, opts []CheckOption) error {
	if outs == nil && len(ins) > 0 {
		return fmt.Errorf("%w: %s has no outputs for %d inputs", pg.ErrInvalidArgument, what, len(ins))
	}
	return CheckCoalesced(what, outs, ins, opts...)
}

// eachPair runs check on every (out, in) pair; out is the zero Tensor
// when outs is nil.
func eachPair(what string, outs, ins []pg.Tensor, check func(out, in pg.Tensor) error) error {
	for i, in := range ins {
		var out pg.Tensor
		if outs != nil {
			out = outs[i]
		}
		if err := check(out, in); err != nil {
			return fmt.Errorf("%s tensor %d: %w", what, i, err)
		}
	}
	return nil
}
