package logger

import (
	"slices"
	"time"

	"go.uber.org/zap/zapcore"
)

// Data is DDPLoggingData: what DDP was built with and what its latest
// sampled iteration measured.
type Data struct {
	Construction
	Runtime
}

// Construction is what DDP knows when it is built (c10d's
// set_construction_data_and_log).
type Construction struct {
	WorldSize            int
	Rank                 int
	Backend              string   // backend_name
	NumParameters        int      // num_parameter_tensors
	ParameterBytes       int64    // total_parameter_size_bytes
	Dtypes               []string // the parameters' distinct dtypes, sorted
	BucketCapBytes       int      // bucket_cap_bytes
	FirstBucketBytes     int      // the first bucket's cap after the rebuild
	BucketSizes          []int    // bytes per bucket of the initial plan, in launch order
	CommHook             string   // the comm hook's name
	FindUnusedParameters bool
	StaticGraph          bool
	GradientAsBucketView bool // gradient_as_bucket_view
}

// Runtime is what the latest sampled iteration measured.
type Runtime struct {
	// Iteration is the synchronised iteration the figures are from.
	Iteration int
	// Samples is how many iterations have been sampled so far
	// (c10d's num_iterations_stats_recorded_).
	Samples int
	// UnusedParameterBytes are the bytes of the parameters that got no
	// gradient on this rank in that iteration.
	UnusedParameterBytes int64

	// The buckets after the rebuild, once it has happened.
	HasRebuiltBuckets            bool
	RebuiltBucketSizes           []int   // bytes per bucket
	RebuiltPerBucketParamIndices [][]int // parameter indices per bucket
	// GradReadyOrder is the order gradients became ready in the iteration
	// the rebuild was planned from (prev_iteration_grad_ready_order_indices).
	GradReadyOrder []int

	// The iteration's intervals (zero when not measured) and their
	// averages over the samples.
	ForwardCompute, AvgForwardCompute           time.Duration
	BackwardCompute, AvgBackwardCompute         time.Duration
	BackwardComm, AvgBackwardComm               time.Duration
	BackwardCommOverlap, AvgBackwardCommOverlap time.Duration
	// LastBucketWait is how long this rank waited for the last bucket's
	// communication after backward: long on the ranks that wait for a
	// straggler, short on the straggler itself. goddp's addition.
	LastBucketWait, AvgLastBucketWait time.Duration

	// The event times of the sampled iteration (zero when not recorded).
	ForwardComputeStart, BackwardComputeStart, BackwardCommStart time.Time
	BackwardComputeEnd, BackwardCommEnd                          time.Time
}

// clone deep-copies the slices, so a caller can keep the result.
func (d Data) clone() Data {
	d.Dtypes = slices.Clone(d.Dtypes)
	d.BucketSizes = slices.Clone(d.BucketSizes)
	d.RebuiltBucketSizes = slices.Clone(d.RebuiltBucketSizes)
	d.GradReadyOrder = slices.Clone(d.GradReadyOrder)
	d.RebuiltPerBucketParamIndices = slices.Clone(d.RebuiltPerBucketParamIndices)
	for i, b := range d.RebuiltPerBucketParamIndices {
		d.RebuiltPerBucketParamIndices[i] = slices.Clone(b)
	}
	return d
}

// MarshalLogObject writes the construction data with c10d's key names.
func (c *Construction) MarshalLogObject(e zapcore.ObjectEncoder) error {
	e.AddInt("world_size", c.WorldSize)
	e.AddInt("rank", c.Rank)
	e.AddString("backend_name", c.Backend)
	e.AddInt("num_parameter_tensors", c.NumParameters)
	e.AddInt64("total_parameter_size_bytes", c.ParameterBytes)
	_ = e.AddArray("dtypes", strings(c.Dtypes))
	e.AddInt("bucket_cap_bytes", c.BucketCapBytes)
	e.AddInt("first_bucket_bytes", c.FirstBucketBytes)
	_ = e.AddArray("bucket_sizes", ints(c.BucketSizes))
	e.AddString("comm_hook", c.CommHook)
	e.AddBool("find_unused_parameters", c.FindUnusedParameters)
	e.AddBool("static_graph", c.StaticGraph)
	e.AddBool("gradient_as_bucket_view", c.GradientAsBucketView)
	return nil
}

// MarshalLogObject writes the runtime data with c10d's key names.
func (r *Runtime) MarshalLogObject(e zapcore.ObjectEncoder) error {
	e.AddInt("iteration", r.Iteration)
	e.AddInt("samples", r.Samples)
	e.AddInt64("unused_parameter_size", r.UnusedParameterBytes)
	e.AddBool("has_rebuilt_buckets", r.HasRebuiltBuckets)
	if r.HasRebuiltBuckets {
		_ = e.AddArray("rebuilt_bucket_sizes", ints(r.RebuiltBucketSizes))
		_ = e.AddArray("rebuilt_per_bucket_param_indices", nested(r.RebuiltPerBucketParamIndices))
	}
	if len(r.GradReadyOrder) > 0 {
		_ = e.AddArray("prev_iteration_grad_ready_order_indices", ints(r.GradReadyOrder))
	}
	e.AddDuration("forward_compute_time", r.ForwardCompute)
	e.AddDuration("avg_forward_compute_time", r.AvgForwardCompute)
	e.AddDuration("backward_compute_time", r.BackwardCompute)
	e.AddDuration("avg_backward_compute_time", r.AvgBackwardCompute)
	e.AddDuration("backward_comm_time", r.BackwardComm)
	e.AddDuration("avg_backward_comm_time", r.AvgBackwardComm)
	e.AddDuration("backward_compute_comm_overlap_time", r.BackwardCommOverlap)
	e.AddDuration("avg_backward_compute_comm_overlap_time", r.AvgBackwardCommOverlap)
	e.AddDuration("last_bucket_wait_time", r.LastBucketWait)
	e.AddDuration("avg_last_bucket_wait_time", r.AvgLastBucketWait)
	return nil
}

type ints []int

func (s ints) MarshalLogArray(e zapcore.ArrayEncoder) error {
	for _, v := range s {
		e.AppendInt(v)
	}
	return nil
}

type strings []string

func (s strings) MarshalLogArray(e zapcore.ArrayEncoder) error {
	for _, v := range s {
		e.AppendString(v)
	}
	return nil
}

type nested [][]int

func (s nested) MarshalLogArray(e zapcore.ArrayEncoder) error {
	for _, v := range s {
		_ = e.AppendArray(ints(v))
	}
	return nil
}
