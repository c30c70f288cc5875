// Package logger is DDP's own record of itself: c10d's DDPLoggingData.
//
// At construction it holds what DDP was built with (world size, rank,
// backend, parameters, dtypes, bucket cap and sizes, comm hook, modes).
// At runtime it is updated on sampled iterations only, 1 to 10 and then
// every 100th (c10d's should_collect_runtime_stats), with the forward,
// backward compute, backward communication and overlap times of that
// iteration and their running averages, the rebuilt buckets, the
// gradient-ready order and the bytes of unused parameters.
//
// Every update is written through the injected *zap.Logger, one line per
// sample, and the whole record can be read as a struct with Data:
//
//	l := logger.New(zl, logger.Construction{WorldSize: 2, Rank: 0, Backend: "tcp"})
//	for it := 1; ; it++ {
//		... run iteration it, noting its event times ...
//		if l.ShouldSample(it) {
//			l.Record(logger.Sample{Iteration: it, ForwardStart: t0, ...})
//		}
//	}
//	d := l.Data() // d.AvgBackwardComm, d.RebuiltBucketSizes, ...
//
// The reducer drives it; a user reads it with reducer.Reducer.LoggingData.
//
// # Intervals
//
// As in c10d's logger.cpp, from the event times of one iteration:
//
//	forward compute         ForwardStart      -> BackwardComputeStart
//	backward compute        BackwardComputeStart -> BackwardComputeEnd
//	backward comm           BackwardCommStart -> BackwardCommEnd
//	comm/compute overlap    BackwardCommStart -> BackwardComputeEnd
//
// where BackwardCommStart is the launch of the first bucket and
// BackwardCommEnd the end of the reducer's Finalize. An interval with a
// missing or reversed end is not recorded and leaves its average alone.
// Averages follow c10d: avg = (d + avg*(n-1)) / n in integer nanoseconds,
// n the number of samples so far.
package logger
