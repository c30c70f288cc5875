package logger

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// DefaultSampleRate is c10d's ddp_runtime_logging_sample_rate: after the
// first ten, every 100th iteration is sampled.
const DefaultSampleRate = 100

// ShouldSample reports whether iteration it (counted from 1) is sampled
// at the given rate: c10d's should_collect_runtime_stats,
// it > 0 && (it <= 10 || it%rate == 0).
func ShouldSample(it, rate int) bool {
	return it > 0 && (it <= 10 || it%rate == 0)
}

// Sample is what the reducer measured in one sampled iteration. A zero
// time means the event was not recorded (for example ForwardStart when
// forward does not run inside DDP).
type Sample struct {
	Iteration            int
	UnusedParameterBytes int64
	ForwardStart         time.Time
	BackwardComputeStart time.Time
	BackwardCommStart    time.Time // the first bucket's launch
	BackwardComputeEnd   time.Time
	BackwardCommEnd      time.Time // the end of Finalize
	LastBucketWait       time.Duration
}

// Logger holds one DDP instance's Data and writes it to a zap.Logger. It
// is safe for concurrent use.
type Logger struct {
	zl   *zap.Logger
	mu   sync.Mutex
	rate int
	data Data
}

// New records the construction data and logs it once ("DDP
// initialized"). A nil zl logs nothing; Data still works.
func New(zl *zap.Logger, c Construction) *Logger {
	if zl == nil {
		zl = zap.NewNop()
	}
	c.Dtypes = slices.Clone(c.Dtypes)
	c.BucketSizes = slices.Clone(c.BucketSizes)
	l := &Logger{zl: zl, rate: DefaultSampleRate, data: Data{Construction: c}}
	snapshot := l.data.clone()
	zl.Info("DDP initialized", zap.Inline(&snapshot.Construction))
	return l
}

// SetSampleRate changes the sampling rate; it must be at least 1.
func (l *Logger) SetSampleRate(rate int) error {
	if rate < 1 {
		return fmt.Errorf("logger: DDP runtime logging sample rate should be equal or greater than 1 (got %d)", rate)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate = rate
	return nil
}

// ShouldSample reports whether iteration it is sampled at the logger's
// rate.
func (l *Logger) ShouldSample(it int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return ShouldSample(it, l.rate)
}

// SetCommHook records the comm hook's name, when it is chosen after New.
func (l *Logger) SetCommHook(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data.CommHook = name
}

// SetRebuilt records the buckets after the rebuild and the ready order
// they were planned from. The next sample logs them.
func (l *Logger) SetRebuilt(sizes []int, perBucket [][]int, readyOrder []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data.HasRebuiltBuckets = true
	l.data.RebuiltBucketSizes = slices.Clone(sizes)
	l.data.RebuiltPerBucketParamIndices = make([][]int, len(perBucket))
	for i, b := range perBucket {
		l.data.RebuiltPerBucketParamIndices[i] = slices.Clone(b)
	}
	l.data.GradReadyOrder = slices.Clone(readyOrder)
}

// Record updates the runtime data with one sampled iteration and logs it
// ("DDP runtime stats") at the debug level: c10d's
// set_runtime_stats_and_log, which prints it only under
// TORCH_DISTRIBUTED_DEBUG=DETAIL. At info, a short job's eleven samples
// per rank would bury everything else; Data keeps the record either way.
func (l *Logger) Record(s Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.data.Runtime
	r.Samples++
	r.Iteration = s.Iteration
	r.UnusedParameterBytes = s.UnusedParameterBytes
	n := r.Samples
	average(&r.ForwardCompute, &r.AvgForwardCompute, s.ForwardStart, s.BackwardComputeStart, n)
	average(&r.BackwardCompute, &r.AvgBackwardCompute, s.BackwardComputeStart, s.BackwardComputeEnd, n)
	average(&r.BackwardComm, &r.AvgBackwardComm, s.BackwardCommStart, s.BackwardCommEnd, n)
	average(&r.BackwardCommOverlap, &r.AvgBackwardCommOverlap, s.BackwardCommStart, s.BackwardComputeEnd, n)
	r.LastBucketWait = s.LastBucketWait
	r.AvgLastBucketWait = (s.LastBucketWait + r.AvgLastBucketWait*time.Duration(n-1)) / time.Duration(n)
	r.ForwardComputeStart, r.BackwardComputeStart, r.BackwardCommStart =
		s.ForwardStart, s.BackwardComputeStart, s.BackwardCommStart
	r.BackwardComputeEnd, r.BackwardCommEnd = s.BackwardComputeEnd, s.BackwardCommEnd
	snapshot := l.data.clone() // a core may encode the fields later
	l.zl.Debug("DDP runtime stats", zap.Int("rank", l.data.Rank), zap.String("comm_hook", l.data.CommHook),
		zap.Inline(&snapshot.Runtime))
}

// average is c10d's calculate_avg_time: the duration from start to end,
// and the running average over n samples. A missing or reversed interval
// sets the duration to zero and leaves the average as it was.
func average(d, avg *time.Duration, start, end time.Time, n int) {
	*d = 0
	if start.IsZero() || end.IsZero() || end.Before(start) {
		return
	}
	*d = end.Sub(start)
	*avg = (*d + *avg*time.Duration(n-1)) / time.Duration(n)
}

// Data returns a copy of the current record.
func (l *Logger) Data() Data {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.data.clone()
}
