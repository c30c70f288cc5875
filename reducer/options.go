package reducer

import (
	"fmt"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The defaults of c10d's reducer (reducer.hpp).
const (
	// DefaultBucketCapBytes is kDefaultBucketBytesCap: 25 MiB.
	DefaultBucketCapBytes = 25 << 20
	// DefaultFirstBucketBytes is kDefaultFirstBucketBytes: 1 MiB, so the
	// first allreduce starts early in backward.
	DefaultFirstBucketBytes = 1 << 20
)

// Param describes one model parameter.
type Param struct {
	Name  string   // e.g. "fc1.weight"; used in every error about it
	Shape []int    // its shape; the gradient has the same
	Dtype pg.Dtype // pg.Float32 or pg.Float64
}

// Numel is the number of elements.
func (p Param) Numel() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Options configures a Reducer. The zero value gives DDP's defaults.
type Options struct {
	// BucketCapBytes caps a bucket's size (bucket_cap_mb). 0 means 25 MiB.
	BucketCapBytes int
	// FirstBucketBytes caps the first bucket after the rebuild. 0 means 1 MiB.
	FirstBucketBytes int
	// FindUnusedParameters: parameters the loss does not reach are marked
	// ready at the start of backward, so their buckets can complete, and
	// those unused on every rank keep their gradient untouched.
	FindUnusedParameters bool
	// StaticGraph: the set of used parameters never changes. The first
	// iteration finds it, without overlap; later iterations reuse it.
	StaticGraph bool
	// GradientAsBucketView (gradient_as_bucket_view): gradients live in
	// their buckets. An engine writes each one into GradientBuffer(i) and
	// passes that to MarkReady, which then copies nothing in, and
	// Finalize copies nothing back. See Note [gradient as bucket view].
	GradientAsBucketView bool
	// HostBuckets keeps the buckets on the host even when the process
	// group offers device buckets (backend.DeviceBucketAllocator, an NCCL
	// group); see Note [device buckets] in device.go.
	HostBuckets bool
	// MixedPrecision (mixed_precision): gradients come in a lower
	// precision than the parameters and are reduced in ReduceDtype; see
	// MixedPrecision. nil means off. It brings its own comm hook, so Hook
	// must be nil.
	MixedPrecision *MixedPrecision
	// CheckFinite: after every synchronised iteration, Finalize checks
	// that each averaged gradient is finite, and returns a NonFiniteError
	// (ErrNonFinite) naming the parameters when one is not. Every rank
	// holds the same averages, so every rank returns it at the same
	// iteration. The iteration is complete all the same: the caller
	// decides whether to stop, or to skip the optimizer step. Off by
	// default, as in torch.
	CheckFinite bool
	// FindNonFiniteOrigin: before each bucket's collective, the reducer
	// checks this rank's contribution for NaN and infinities; a slot that
	// holds one is sent as zeros instead, so the value never reaches the
	// other ranks. At Finalize the ranks agree (one allreduce of one word
	// per synchronised iteration, or one word more on the used map's with
	// FindUnusedParameters; an allgather only when some rank found one), and every rank returns the same
	// NonFiniteOriginError (ErrNonFinite) naming the ranks, the iteration, the first bucket and
	// the parameters. It works with every comm hook and process group,
	// since it runs before the hook; see Note [where the NaN began] for
	// what it cannot see (device gradients, half-precision buckets, an
	// overflow inside a compression hook: CheckFinite catches those after
	// the fact).
	FindNonFiniteOrigin bool
	// CheckReplicasEvery: every this many synchronised iterations,
	// ddp.DDP.RunAll first checks that every rank holds the same
	// parameters (VerifyReplicas: one allreduce of 16 bytes per parameter
	// and a digest of each at memory speed) and fails every rank, naming
	// the first parameter that differs, when they do not. 0 means off.
	// The reducer does not call it by itself: an engine that drives the
	// reducer directly calls VerifyReplicas, or rides ReplicaWords on an
	// allreduce MAX of its own (see Note [replica check]).
	CheckReplicasEvery int
	// Hook communicates each bucket. nil means commhook.Allreduce.
	Hook commhook.Hook
	// Logger receives the reducer's logs. nil means none.
	Logger *zap.Logger
	// Registerer receives the reducer's metrics. nil means none.
	Registerer prometheus.Registerer
	// Timeline receives a Chrome trace of every iteration. nil means none.
	// The caller closes it after the last iteration.
	Timeline *timeline.Writer
}

func (o Options) withDefaults() (Options, error) {
	if o.BucketCapBytes < 0 || o.FirstBucketBytes < 0 {
		return o, fmt.Errorf("reducer: bucket sizes must not be negative (BucketCapBytes=%d, FirstBucketBytes=%d)",
			o.BucketCapBytes, o.FirstBucketBytes)
	}
	if o.CheckReplicasEvery < 0 {
		return o, fmt.Errorf("reducer: CheckReplicasEvery is %d; want 0 (off) or a positive number of iterations",
			o.CheckReplicasEvery)
	}
	if o.BucketCapBytes == 0 {
		o.BucketCapBytes = DefaultBucketCapBytes
	}
	if o.FirstBucketBytes == 0 {
		o.FirstBucketBytes = DefaultFirstBucketBytes
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MixedPrecision != nil {
		if err := o.MixedPrecision.check(); err != nil {
			return o, err
		}
		if o.Hook != nil {
			return o, fmt.Errorf("%w: MixedPrecision communicates through its own hook (torch's "+
				"_reducer_allreduce_and_upcast_hook); leave Options.Hook nil", ErrHookRegistration)
		}
	}
	return o, nil
}

// rebuilds reports whether buckets are rebuilt in gradient-ready order
// after the first iteration: c10d's should_rebuild_buckets, before
// has_rebuilt_bucket_ is considered.
func (o Options) rebuilds() bool { return o.StaticGraph || !o.FindUnusedParameters }

// initialLimits are the size limits of the first bucket plan. Like DDP
// (PyTorch PR #72843), when buckets will be rebuilt the first iteration
// uses one bucket per dtype, so no rank can launch a partial plan that
// disagrees with another's.
func (o Options) initialLimits() []int {
	if o.rebuilds() {
		return []int{int(^uint(0) >> 1)}
	}
	return []int{o.FirstBucketBytes, o.BucketCapBytes}
}
