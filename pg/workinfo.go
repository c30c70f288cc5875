package pg

import "time"

// WorkInfo describes a finished Work, as c10d's WorkInfo: what the
// completion hooks of a CompletionHooker receive.
type WorkInfo struct {
	Op    OpType
	Seq   uint64 // Work.Seq
	Rank  int    // the reporting rank in its group
	Dtype Dtype  // 0 for barriers
	// InBytes and OutBytes are the sizes of this rank's input and output
	// buffers (for in-place collectives, both are the tensor's size; for
	// coalesced ones, the sums).
	InBytes, OutBytes int64
	// Issued is when the call was made, Started when the backend began
	// it (after the collectives before it), Finished when it completed.
	Issued, Started, Finished time.Time
	Err                       error // nil on success
}

// QueueDuration is how long the Work waited behind earlier ones.
func (w WorkInfo) QueueDuration() time.Duration { return nonNegative(w.Started.Sub(w.Issued)) }

// ActiveDuration is how long the Work ran, c10d's activeDuration.
func (w WorkInfo) ActiveDuration() time.Duration { return nonNegative(w.Finished.Sub(w.Started)) }

// Duration is QueueDuration plus ActiveDuration.
func (w WorkInfo) Duration() time.Duration { return nonNegative(w.Finished.Sub(w.Issued)) }

func nonNegative(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}
