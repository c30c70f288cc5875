package commhook

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Stateful is implemented by hooks whose state lives across iterations
// and must be saved for a resumed run to continue exactly: PowerSGD's
// and BatchedPowerSGD's iteration count, error feedback and Q matrices.
// The state is this rank's own; every rank saves and loads its own.
//
// State returns a copy, as named vectors of float64 (which hold float32
// values exactly); LoadState replaces the state with one State returned.
// Call both between iterations, when no bucket is in flight, and
// LoadState before the first iteration that should use it.
type Stateful interface {
	State() map[string][]float64
	LoadState(map[string][]float64) error
}

// powerState is PowerSGD's state. Vectors are kept in the compute dtype
// (float32 or float64); loaded ones stay float64 until first used.
type powerState struct {
	iter        int
	numelBefore int // compression statistics, as torch's PowerSGDState
	numelAfter  int
	errs        map[string]pg.Tensor // error feedback, by key
	qs          map[string]pg.Tensor // warm-start Qs, by key
}

func newPowerState() powerState {
	return powerState{errs: map[string]pg.Tensor{}, qs: map[string]pg.Tensor{}}
}

// The names of the state's vectors: the counters, then error/<key> and
// q/<key>, where a key is a parameter index (PowerSGD) or the
// comma-separated parameter indices of a bucket (BatchedPowerSGD).
const (
	iterKey   = "iter"
	beforeKey = "numel_before_compression"
	afterKey  = "numel_after_compression"
	errPrefix = "error/"
	qPrefix   = "q/"
)

func paramKey(index int) string { return strconv.Itoa(index) }

func bucketKey(params []ParamView) string {
	parts := make([]string, len(params))
	for i, v := range params {
		parts[i] = strconv.Itoa(v.Index)
	}
	return strings.Join(parts, ",")
}

// stateVec returns the vector of n elements kept under key in m, as []T,
// and whether it existed; a missing one is created, zeroed.
func stateVec[T float](m map[string]pg.Tensor, key string, n int) ([]T, bool, error) {
	want := tensorOf([]T{0}).Dtype
	t, found := m[key]
	switch {
	case !found:
		t = pg.NewTensor(want, n)
	case t.Len() != n:
		return nil, false, fmt.Errorf(
			"commhook: the saved state %q holds %d values, but the model needs %d; was it saved by another model?", key, t.Len(),
			n)
	case t.Dtype != want:
		c := pg.NewTensor(want, n)
		if err := backend.Convert(c, t); err != nil {
			return nil, false, err
		}
		t = c
	}
	m[key] = t
	return pg.View[T](t), found, nil
}

// State returns a copy of the state: see Stateful.
func (c *core) State() map[string][]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]float64{
		iterKey:   {float64(c.st.iter)},
		beforeKey: {float64(c.st.numelBefore)},
		afterKey:  {float64(c.st.numelAfter)},
	}
	for prefix, m := range map[string]map[string]pg.Tensor{errPrefix: c.st.errs, qPrefix: c.st.qs} {
		for k, t := range m {
			v := make([]float64, t.Len())
			_ = backend.Convert(pg.Float64s(v), t) // float to float64: cannot fail
			out[prefix+k] = v
		}
	}
	return out
}

// LoadState replaces the state with st, which State returned (on this
// rank, in an earlier run). A vector whose length does not fit the model
// fails the first bucket that uses it.
func (c *core) LoadState(st map[string][]float64) error {
	next := newPowerState()
	counters := map[string]*int{iterKey: &next.iter, beforeKey: &next.numelBefore, afterKey: &next.numelAfter}
	for _, name := range slices.Sorted(maps.Keys(st)) {
		v := st[name]
		if p, ok := counters[name]; ok {
			if len(v) != 1 || v[0] < 0 || v[0] != math.Trunc(v[0]) || v[0] > 1<<53 {
				return fmt.Errorf("commhook: %s state %q: want one non-negative integer, got %v", c.name, name, v)
			}
			*p = int(v[0])
			delete(counters, name)
			continue
		}
		into := next.errs
		key, ok := strings.CutPrefix(name, errPrefix)
		if !ok {
			into = next.qs
			key, ok = strings.CutPrefix(name, qPrefix)
		}
		if !ok || key == "" {
			return fmt.Errorf("commhook: %s state has an unknown entry %q", c.name, name)
		}
		into[key] = pg.Float64s(slices.Clone(v))
	}
	if _, ok := counters[iterKey]; ok {
		return fmt.Errorf("commhook: %s state has no %q; is it a %s state?", c.name, iterKey, c.name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = next
	return nil
}

// State returns a copy of h's state: see Stateful.
func (h *PowerSGD) State() map[string][]float64 { return h.c.State() }

// LoadState replaces h's state: see Stateful.
func (h *PowerSGD) LoadState(st map[string][]float64) error { return h.c.LoadState(st) }

// Iter is the number of iterations h has counted.
func (h *PowerSGD) Iter() int {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.c.st.iter
}

// CompressionStats returns torch's compression_stats: the elements
// before and after compression summed over every compressed iteration,
// and their ratio (0 before the first).
func (h *PowerSGD) CompressionStats() (rate float64, before, after int) { return h.c.stats() }

func (c *core) stats() (rate float64, before, after int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before, after = c.st.numelBefore, c.st.numelAfter
	if after > 0 {
		rate = float64(before) / float64(after)
	}
	return rate, before, after
}
