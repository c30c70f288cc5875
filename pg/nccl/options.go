package nccl

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
)

// Defaults of Options.
const (
	DefaultFlightRecorderSize = 2000 // flight.DefaultEntries, as TORCH_NCCL_TRACE_BUFFER_SIZE's usual setting
	DefaultPollInterval       = 200 * time.Microsecond
	DefaultAsyncErrorInterval = 50 * time.Millisecond
	DefaultStoreKey           = "nccl/unique_id"
)

// Options configure a Group. Rank, Size, Library and CUDA are required.
type Options struct {
	Rank, Size int
	// Device is the GPU ordinal this rank uses (usually the local rank).
	Device int
	// Library and CUDA are the loaded NCCL and CUDA driver (libnccl.Load,
	// libnccl.LoadCUDA); the caller decides where they come from.
	Library *libnccl.Library
	CUDA    *libnccl.CUDA
	// Timeout is the group timeout: a Work not finished this long after
	// it was issued fails with pg.ErrTimeout and aborts the communicator.
	// It also bounds New when ctx has no deadline. Zero means
	// pg.DefaultTimeout.
	Timeout time.Duration
	// Logger receives failures and, on a timeout, the flight recorder's
	// entries; nil means no logging.
	Logger *zap.Logger
	// StoreKey is the store key under which rank 0 publishes the unique
	// id. Zero means DefaultStoreKey; use a prefix store or a distinct key
	// per group made on one store.
	StoreKey string
	// FlightRecorderSize is how many recent operations the pg/flight
	// Recorder put over this group keeps (flight.Wrap asks the group,
	// through flight.Attacher, when its own Options.Entries is 0). Zero
	// means DefaultFlightRecorderSize. The group keeps no ring itself.
	FlightRecorderSize int
	// FlightDumpDir, if not empty, is where the watchdog writes the
	// attached pg/flight Recorder (flight.Recorder.DumpFile) when a
	// collective times out, as torch dumps on a watchdog timeout
	// (TORCH_NCCL_DUMP_ON_TIMEOUT). Without it the entries are only
	// logged.
	FlightDumpDir string
	// EnableTiming records a timing CUDA event before and after each
	// collective's NCCL calls, as TORCH_NCCL_ENABLE_TIMING: the watchdog
	// then finds when each collective started on the stream from the
	// first, and measures its time on the GPU (cuEventElapsedTime), which
	// pg/flight dumps as duration_ms. Off, a collective is found started
	// when the one before it on the stream completed, and no duration is
	// measured. Two events per collective more.
	EnableTiming bool
	// PollInterval is how often the watchdog queries pending Works'
	// events, AsyncErrorInterval how often it asks NCCL for asynchronous
	// errors. Zero means the defaults.
	PollInterval, AsyncErrorInterval time.Duration
	// BucketRegistration is how device buckets (NewDeviceBucket) are
	// registered with NCCL. Zero (RegisterAuto) picks, from the loaded
	// library, symmetric windows (2.27+), else ncclCommRegister (2.19+),
	// else plain buffers.
	BucketRegistration Registration
}

func (o Options) withDefaults() (Options, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return o, fmt.Errorf("rank %d of size %d: want 0 <= Rank < Size", o.Rank, o.Size)
	}
	if o.Timeout < 0 || o.FlightRecorderSize < 0 || o.PollInterval < 0 || o.AsyncErrorInterval < 0 {
		return o, fmt.Errorf("negative Timeout, FlightRecorderSize, PollInterval or AsyncErrorInterval")
	}
	if o.Timeout == 0 {
		o.Timeout = pg.DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.StoreKey == "" {
		o.StoreKey = DefaultStoreKey
	}
	if o.FlightRecorderSize == 0 {
		o.FlightRecorderSize = DefaultFlightRecorderSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.AsyncErrorInterval == 0 {
		o.AsyncErrorInterval = DefaultAsyncErrorInterval
	}
	return o, nil
}
