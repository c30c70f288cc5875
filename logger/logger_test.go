package logger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/logger"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func Example() {
	zl := zap.NewExample() // JSON lines on stdout, without timestamps
	l := logger.New(zl, logger.Construction{WorldSize: 2, Rank: 0, Backend: "tcp", NumParameters: 2, ParameterBytes: 40,
		Dtypes: []string{"float32"}, BucketCapBytes: 25 << 20, FirstBucketBytes: 1 << 20, BucketSizes: []int{40},
		CommHook: "allreduce"})
	t0 := time.Unix(0, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	if l.ShouldSample(1) {
		l.Record(logger.Sample{Iteration: 1, ForwardStart: at(0), BackwardComputeStart: at(300), BackwardCommStart: at(500),
			BackwardComputeEnd: at(900), BackwardCommEnd: at(1100), LastBucketWait: 150 * time.Microsecond})
	}
	// Output:
	// {"level":"info","msg":"DDP initialized","world_size":2,"rank":0,"backend_name":"tcp","num_parameter_tensors":2,"total_parameter_size_bytes":40,"dtypes":["float32"],"bucket_cap_bytes":26214400,"first_bucket_bytes":1048576,"bucket_sizes":[40],"comm_hook":"allreduce","find_unused_parameters":false,"static_graph":false,"gradient_as_bucket_view":false}
	// {"level":"debug","msg":"DDP runtime stats","rank":0,"comm_hook":"allreduce","iteration":1,"samples":1,"unused_parameter_size":0,"has_rebuilt_buckets":false,"forward_compute_time":"300µs","avg_forward_compute_time":"300µs","backward_compute_time":"600µs","avg_backward_compute_time":"600µs","backward_comm_time":"600µs","avg_backward_comm_time":"600µs","backward_compute_comm_overlap_time":"400µs","avg_backward_compute_comm_overlap_time":"400µs","last_bucket_wait_time":"150µs","avg_last_bucket_wait_time":"150µs"}
}

func TestShouldSample(t *testing.T) {
	var got []int
	for it := -1; it <= 1000; it++ {
		if logger.ShouldSample(it, logger.DefaultSampleRate) {
			got = append(got, it)
		}
	}
	want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}
	if len(got) != len(want) {
		t.Fatalf("sampled %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sampled %v, want %v", got, want)
		}
	}
	if !logger.ShouldSample(15, 5) || logger.ShouldSample(16, 5) {
		t.Error("rate 5 should sample 15 and not 16")
	}
}

func TestSetSampleRate(t *testing.T) {
	l := logger.New(nil, logger.Construction{})
	if err := l.SetSampleRate(0); err == nil || !strings.Contains(err.Error(), "equal or greater than 1") {
		t.Errorf("rate 0: %v", err)
	}
	if err := l.SetSampleRate(3); err != nil || !l.ShouldSample(12) || l.ShouldSample(13) {
		t.Errorf("rate 3: %v", err)
	}
}

// Averages follow c10d: avg = (d + avg*(n-1)) / n in integer
// nanoseconds; a missing interval reads zero and leaves its average.
func TestAverages(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	l := logger.New(zap.New(core), logger.Construction{Rank: 3})
	t0 := time.Unix(0, 0)
	ns := func(v int) time.Time { return t0.Add(time.Duration(v)) }
	l.Record(logger.Sample{Iteration: 1, ForwardStart: ns(1), BackwardComputeStart: ns(11), BackwardComputeEnd: ns(31),
		BackwardCommStart: ns(21), BackwardCommEnd: ns(41)})
	l.Record(logger.Sample{Iteration: 2, ForwardStart: ns(1), BackwardComputeStart: ns(2), BackwardComputeEnd: ns(3),
		BackwardCommStart: ns(5), BackwardCommEnd: ns(9)})
	l.Record(logger.Sample{Iteration: 3, BackwardComputeStart: ns(0), BackwardComputeEnd: ns(7)}) // no forward, no comm
	d := l.Data()
	// forward: 10, 1, missing -> avg (1 + 10*1)/2 = 5 (integer), then unchanged
	// compute: 20, 1, 7 -> 20, (1+20)/2 = 10, (7+10*2)/3 = 9
	// comm: 20, 4, missing -> 20, 12, 12; overlap: 10, reversed (3 < 5), missing -> 10, 10, 10
	if d.Samples != 3 || d.Iteration != 3 || d.ForwardCompute != 0 || d.AvgForwardCompute != 5 || d.BackwardCompute != 7 ||
		d.AvgBackwardCompute != 9 || d.BackwardComm != 0 || d.AvgBackwardComm != 12 || d.AvgBackwardCommOverlap != 10 {
		t.Errorf("runtime %+v", d.Runtime)
	}
	if n := logs.FilterMessage("DDP runtime stats").FilterField(zap.Int("rank", 3)).Len(); n != 3 {
		t.Errorf("%d runtime lines for rank 3, want 3", n)
	}
}

func TestDataIsACopy(t *testing.T) {
	sizes := []int{1, 2}
	l := logger.New(nil, logger.Construction{BucketSizes: sizes})
	sizes[0] = 99
	l.SetRebuilt([]int{5}, [][]int{{0, 1}}, []int{1, 0})
	d := l.Data()
	d.BucketSizes[1] = 98
	d.RebuiltPerBucketParamIndices[0][0] = 97
	again := l.Data()
	if again.BucketSizes[0] != 1 || again.BucketSizes[1] != 2 || again.RebuiltPerBucketParamIndices[0][0] != 0 ||
		!again.HasRebuiltBuckets {
		t.Errorf("the logger's data changed through a copy: %+v", again)
	}
}
