package bucket

import (
	"errors"
	"fmt"
	"slices"

	"github.com/goddp/ddp/pg"
)

// Param describes one parameter for bucket planning.
type Param struct {
	Numel        int      // number of elements
	Dtype        pg.Dtype // element type; buckets never mix dtypes
	Device       int      // device index; buckets never mix devices
	ExpectSparse bool     // gets a bucket of its own, with limit 0
}

// ErrNoParams is returned when there is nothing to assign.
var ErrNoParams = errors.New(
	"bucket: no parameters to assign (a model needs at least one parameter that requires a gradient)")

// groupKey is what a bucket must share: dtype and device.
type groupKey struct {
	dtype  pg.Dtype
	device int
}

// group accumulates one (dtype, device) group's open bucket.
type group struct {
	indices []int
	bytes   int
	limit   int // the limit the open bucket is filling towards
	cursor  int // position in sizeLimits; stays on the last one
}

// planned is an emitted bucket with its limit.
type planned struct {
	indices []int
	limit   int
}

// AssignBySize groups parameters into buckets, exactly as PyTorch's
// compute_bucket_assignment_by_size does.
//
// params[i] is the parameter whose index is order[i] (nil order means the
// identity), and the buckets list those indices. Without an order the
// buckets are sorted by their smallest index; with one (a rebuild, where
// params come in gradient-ready order) they are left in the order they
// closed. bucketLimits[b] is the size limit bucket b was filled against.
func AssignBySize(params []Param, sizeLimits []int, order []int) (buckets [][]int, bucketLimits []int, err error) {
	if err := validate(params, sizeLimits, order); err != nil {
		return nil, nil, err
	}
	var (
		out    []planned
		groups = map[groupKey]*group{}
		keys   []groupKey // first-seen order, so leftovers flush deterministically
	)
	for i, p := range params {
		idx := i
		if order != nil {
			idx = order[i]
		}
		if p.ExpectSparse {
			out = append(out, planned{[]int{idx}, 0})
			continue
		}
		key := groupKey{p.Dtype, p.Device}
		g, ok := groups[key]
		if !ok {
			g = &group{}
			groups[key] = g
			keys = append(keys, key)
		}
		g.indices = append(g.indices, idx)
		g.bytes += p.Numel * p.Dtype.Size()
		g.limit = sizeLimits[g.cursor]
		if g.bytes >= g.limit {
			out = append(out, planned{g.indices, g.limit})
			g.indices, g.bytes = nil, 0
			if g.cursor < len(sizeLimits)-1 {
				g.cursor++
			}
		}
	}
	for _, k := range keys {
		if g := groups[k]; len(g.indices) > 0 {
			out = append(out, planned{g.indices, g.limit})
		}
	}
	if order == nil {
		slices.SortFunc(out, func(a, b planned) int { return slices.Min(a.indices) - slices.Min(b.indices) })
	}
	for _, p := range out {
		buckets = append(buckets, p.indices)
		bucketLimits = append(bucketLimits, p.limit)
	}
	return buckets, bucketLimits, nil
}

func validate(params []Param, sizeLimits []int, order []int) error {
	if len(params) == 0 {
		return ErrNoParams
	}
	if len(sizeLimits) == 0 {
		return errors.New("bucket: no size limits given; pass at least one, e.g. []int{25 << 20}")
	}
	if order != nil {
		if len(order) != len(params) {
			return fmt.Errorf("bucket: order has %d indices for %d parameters", len(order), len(params))
		}
		seen := make([]bool, len(params))
		for _, idx := range order {
			if idx < 0 || idx >= len(params) || seen[idx] {
				return fmt.Errorf("bucket: order %v is not a permutation of 0..%d", order, len(params)-1)
			}
			seen[idx] = true
		}
	}
	for i, p := range params {
		if p.Numel < 0 {
			return fmt.Errorf("bucket: parameter %d has negative size %d", i, p.Numel)
		}
		if !p.Dtype.Valid() {
			return fmt.Errorf("bucket: parameter %d has no valid dtype (%v)", i, p.Dtype)
		}
	}
	return nil
}
