package reducer

import (
	"context"
	"fmt"
	"strings"

	"github.com/goddp/ddp/pg"
)

// maxDims is the most dimensions a parameter may have: the size of a
// parameter's fixed-width descriptor in the cross-rank check.
const maxDims = 8

// descWidth is a descriptor's length: dtype code, rank, then dimensions.
const descWidth = 2 + maxDims

// verifyModel checks, on every rank at once, that all ranks hold the same
// model: first the parameter counts, then every parameter's dtype and
// shape. A mismatch fails on every rank, naming the rank and parameter.
func verifyModel(ctx context.Context, g pg.ProcessGroup, params []Param) error {
	n, size := len(params), g.Size()
	head := []int64{int64(n), 0}
	for _, p := range params {
		if len(p.Shape) > maxDims {
			head[1] = 1
		}
	}
	heads := make([]int64, 2*size)
	if err := g.AllGather(ctx, pg.Int64s(heads), pg.Int64s(head)).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: checking the model across ranks: %w", err)
	}
	var bad []string
	for r := range size {
		if heads[2*r] != int64(n) {
			bad = append(bad, fmt.Sprintf("rank %d has %d parameters", r, heads[2*r]))
		}
		if heads[2*r+1] != 0 {
			bad = append(bad, fmt.Sprintf("rank %d has a parameter with more than %d dimensions", r, maxDims))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w, but rank %d has %d parameters while %s; build the same model on every rank", ErrModelMismatch,
			g.Rank(), n, strings.Join(bad, ", "))
	}
	mine := make([]int64, n*descWidth)
	for i, p := range params {
		describeParam(mine[i*descWidth:(i+1)*descWidth], p)
	}
	all := make([]int64, size*len(mine))
	if err := g.AllGather(ctx, pg.Int64s(all), pg.Int64s(mine)).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: checking parameter shapes across ranks: %w", err)
	}
	ref := all[:len(mine)]
	for r := 1; r < size; r++ {
		theirs := all[r*len(mine) : (r+1)*len(mine)]
		for i := range n {
			a, b := ref[i*descWidth:(i+1)*descWidth], theirs[i*descWidth:(i+1)*descWidth]
			if !equal(a, b) {
				return fmt.Errorf(
					"%w: parameter %d (%s on this rank) is %s on rank %d but %s on rank 0; build the same model on every rank",
					ErrModelMismatch, i, params[i].Name, formatDesc(b), r, formatDesc(a))
			}
		}
	}
	return nil
}

func describeParam(d []int64, p Param) {
	d[0] = int64(p.Dtype)
	d[1] = int64(len(p.Shape))
	for j, s := range p.Shape {
		d[2+j] = int64(s)
	}
}

func formatDesc(d []int64) string {
	return fmt.Sprintf("%v %v", pg.Dtype(d[0]), d[2:2+d[1]])
}

func equal(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// broadcastBucketBytes is how much DDP broadcasts at once when it syncs
// the initial parameters (broadcast_bucket_size, 250 MiB).
const broadcastBucketBytes = 250 << 20

// BroadcastParams copies rank 0's parameter values to every rank, in
// place, so replicas start identical. values[i] is parameter i's data.
// Parameters are packed into flat buffers of up to 250 MiB per dtype, as
// DDP's broadcast_coalesced does. It is collective.
func (r *Reducer) BroadcastParams(ctx context.Context, values []pg.Tensor) error {
	return r.broadcastParamsFrom(ctx, values, 0)
}

// broadcastParamsFrom is BroadcastParams from root instead of rank 0.
func (r *Reducer) broadcastParamsFrom(ctx context.Context, values []pg.Tensor, root int) error {
	if err := r.checkValues("BroadcastParams", values); err != nil {
		return err
	}
	for _, dt := range []pg.Dtype{pg.Float32, pg.Float64} {
		var group []int
		bytes := 0
		for i := range values {
			if r.params[i].Dtype != dt {
				continue
			}
			group = append(group, i)
			bytes += len(values[i].Data)
			if bytes >= broadcastBucketBytes {
				if err := r.broadcastGroup(ctx, values, group, bytes, root); err != nil {
					return err
				}
				group, bytes = nil, 0
			}
		}
		if len(group) > 0 {
			if err := r.broadcastGroup(ctx, values, group, bytes, root); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkValues checks that values are the parameters' values: one per
// parameter, each of the parameter's own dtype (the master weights' under
// MixedPrecision, not the gradients') and size.
func (r *Reducer) checkValues(caller string, values []pg.Tensor) error {
	if len(values) != len(r.params) {
		return fmt.Errorf("reducer: %s got %d values for %d parameters", caller, len(values), len(r.params))
	}
	for i, v := range values {
		if p := r.params[i]; v.Dtype != p.Dtype || v.Len() != r.numel[i] {
			return fmt.Errorf("%w: value of parameter %d (%s) is %v with %d elements, want %v with %d", ErrBadGradient, i,
				p.Name, v.Dtype, v.Len(), p.Dtype, r.numel[i])
		}
	}
	return nil
}

func (r *Reducer) broadcastGroup(ctx context.Context, values []pg.Tensor, group []int, bytes, root int) error {
	flat := pg.NewTensor(values[group[0]].Dtype, bytes/values[group[0]].Dtype.Size())
	off := 0
	for _, i := range group {
		off += copy(flat.Data[off:], values[i].Data)
	}
	if err := r.g.Broadcast(ctx, flat, root).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: broadcasting parameters from rank %d: %w", root, err)
	}
	off = 0
	for _, i := range group {
		off += copy(values[i].Data, flat.Data[off:])
	}
	return nil
}
