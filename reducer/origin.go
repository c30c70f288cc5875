package reducer

import (
	"context"
	"fmt"
	"strings"

	"github.com/goddp/ddp/pg"
)

// Note [where the NaN began]
//
// CheckFinite sees a NaN only once it is in the average, that is on every
// rank, with no clue which rank's gradients held it. FindNonFiniteOrigin
// looks before the value spreads. Just before a bucket's comm hook runs
// (launch), this rank's contribution is checked at memory speed (Finite
// over the whole buffer; per slot only when that fails). A slot holding a
// NaN or an infinity is noted and zeroed, so the collective carries zeros
// from this rank: the other ranks never receive the value, and every rank
// still issues exactly the collectives it would have, so none is skipped
// and none waits. Because the check runs in the reducer before the hook,
// it works with every hook (compression, PowerSGD, a user's) and every
// process group.
//
// At Finalize, once every bucket's Work and the used map are done (Note
// [used map after the buckets]: a hook may still issue collectives until
// then), the ranks agree whether some rank zeroed a slot: with
// FindUnusedParameters the flag rides on the used map's allreduce SUM as
// one more word (the sum counts the ranks), which is already the last
// collective of the iteration; otherwise it takes an allreduce MAX of one
// word. The machine says which (actAgreeOrigin). Only when one did, every rank gathers the ranks' maps
// (one word per parameter) and builds the same NonFiniteOriginError:
// the ranks, the iteration, the first bucket in launch order and the
// parameters. The iteration is complete and the ranks in step; the caller
// decides, as with CheckFinite (ddp-train: --on-nonfinite).
//
// A joined rank (Join) shadows with zeros, which are finite, and takes
// part in the agreement through its shadow Finalize.
//
// Device buckets (Note [device buckets]): a host gradient's slot is
// checked in the host bucket, and a bad one is zeroed and uploaded again;
// a device gradient's slot (pg.DeviceTensor; only the allreduce hook takes
// them) is checked where it is downloaded for the division anyway
// (fixDeviceSlots), and goes up as zeros.
//
// What it does not see: half-precision buckets (MixedPrecision's float16)
// are not checked; and a finite value that overflows inside a compression
// hook (fp16 above 65504) is born in the collective, not on a rank.
// CheckFinite still catches those in the average.

// NonFiniteOriginError names where a NaN or an infinity began
// (Options.FindNonFiniteOrigin): the ranks whose own gradients held one
// before their bucket's collective. Every rank returns the same error at
// the same iteration. Those ranks' bad slots were sent as zeros, so the
// iteration completed with finite values from them; skipping the
// optimizer step, or stopping, is the caller's choice. It wraps
// ErrNonFinite.
type NonFiniteOriginError struct {
	Iteration int      // the synchronised iteration, counted from 1
	Ranks     []int    // the ranks whose gradients held a NaN or an infinity, ascending
	Bucket    int      // the first such bucket in launch order, on any of them
	Params    []int    // the parameters that held one on some rank, ascending
	Names     []string // their names
}

func (e *NonFiniteOriginError) Error() string {
	who := "rank " + rankList(e.Ranks)
	if len(e.Ranks) > 1 {
		who = "ranks " + rankList(e.Ranks)
	}
	return fmt.Sprintf("reducer: non-finite gradients began on %s at iteration %d: a NaN or an infinity in bucket %d "+
		"first (parameters %s), found before the collective and sent as zeros, so no other rank received it",
		who, e.Iteration, e.Bucket, strings.Join(e.Names, ", "))
}

func (e *NonFiniteOriginError) Unwrap() error { return ErrNonFinite }

// originState is this rank's findings in the iteration in progress. Only
// the goroutine that launches buckets, then Finalize, touches it.
type originState struct {
	bad   []int32   // per parameter: its slot held a NaN or an infinity (1)
	badT  pg.Tensor // over bad, for the allgather
	found bool      // some slot did
	flag  pg.Tensor // one int32 word, allreduced MAX
	used  []int32   // with FindUnusedParameters: the used map and the flag after it, allreduced SUM
	usedT pg.Tensor // over used
}

func (r *Reducer) initOrigin() {
	if !r.opts.FindNonFiniteOrigin {
		return
	}
	o := &r.origin
	o.bad = make([]int32, len(r.params))
	o.badT = pg.Int32s(o.bad)
	o.flag = pg.NewTensor(pg.Int32, 1)
	if r.opts.FindUnusedParameters && !r.opts.StaticGraph {
		o.used = make([]int32, len(r.params)+1)
		o.usedT = pg.Int32s(o.used)
	}
}

// usedMapTensor is what the used map's allreduce SUM sends: the map, or,
// when the flag rides on it, the map and this rank's flag in one more
// word (the sum counts the ranks that found one).
func (r *Reducer) usedMapTensor() pg.Tensor {
	o := &r.origin
	if o.used == nil {
		return r.usedMap
	}
	n := copy(o.used, pg.View[int32](r.usedMap))
	o.used[n] = 0
	if o.found {
		o.used[n] = 1
	}
	return o.usedT
}

// usedMapResult is the used map summed over the ranks.
func (r *Reducer) usedMapResult() []int32 {
	if r.origin.used == nil {
		return pg.View[int32](r.usedMap)
	}
	return r.origin.used[:len(r.params)]
}

// note records that parameter p's slot held a NaN or an infinity.
func (o *originState) note(p int) { o.bad[p], o.found = 1, true }

// agreeOrigin, at Finalize after every collective of the iteration, tells
// every rank whether some rank found a NaN or an infinity before its
// collective, and if so returns the same error on every rank (Iteration
// is the caller's). Collective. With own, the flags take an allreduce
// MAX of their own; else they rode on the used map's (usedMapTensor).
func (r *Reducer) agreeOrigin(ctx context.Context, own bool) (*NonFiniteOriginError, error) {
	o := &r.origin
	some := o.used != nil && o.used[len(r.params)] > 0
	if own {
		flag := pg.View[int32](o.flag)
		flag[0] = 0
		if o.found {
			flag[0] = 1
		}
		if err := r.g.AllReduce(ctx, o.flag, pg.Op(pg.Max)).Wait(ctx); err != nil {
			return nil, fmt.Errorf("reducer: agreeing whether some rank's gradients held a NaN or an infinity: %w", err)
		}
		some = flag[0] > 0
	}
	if !some {
		return nil, nil
	}
	all := make([]int32, r.g.Size()*len(r.params))
	err := r.g.AllGather(ctx, pg.Int32s(all), o.badT).Wait(ctx)
	clear(o.bad)
	o.found = false
	if err != nil {
		return nil, fmt.Errorf("reducer: some rank's gradients held a NaN or an infinity, and gathering which failed: %w",
			err)
	}
	return r.originError(all), nil
}

// originError reads the gathered maps: rank k's is all[k·P : (k+1)·P].
func (r *Reducer) originError(all []int32) *NonFiniteOriginError {
	n := len(r.params)
	e := &NonFiniteOriginError{Bucket: -1}
	seen := make([]bool, n)
	for rank := 0; rank*n < len(all); rank++ {
		hit := false
		for p, v := range all[rank*n : (rank+1)*n] {
			if v == 0 {
				continue
			}
			hit, seen[p] = true, true
			if b := r.layout.bucketOf[p]; e.Bucket < 0 || b < e.Bucket {
				e.Bucket = b
			}
		}
		if hit {
			e.Ranks = append(e.Ranks, rank)
		}
	}
	for p, s := range seen {
		if s {
			e.Params = append(e.Params, p)
			e.Names = append(e.Names, r.params[p].Name)
		}
	}
	return e
}
