// Package timeline writes a Chrome trace: one JSON file per rank that
// opens in Perfetto (ui.perfetto.dev) or chrome://tracing, as Horovod's
// timeline does.
//
// A trace is a list of complete events ("ph":"X"): a name, a start and a
// duration, on a lane (a thread id within the rank's process id). The
// reducer writes, per iteration, a "step" slice, "forward" and "backward"
// on the compute lane, each gradient's "copy" into its bucket, each
// bucket's "launch" (the comm hook's call) and "wait" (Finalize blocked on
// it) on the reducer lane, and each bucket's "communication", from launch
// to completion, on a lane of its own:
//
//	w, err := timeline.Create("trace/rank-0.json", 0)
//	opts := reducer.Options{Timeline: w}
//	... train ...
//	err = w.Close() // writes the closing bracket
//
// Timestamps are Unix microseconds, so the files of several ranks line up
// when loaded together. The format is the JSON array form, which stays
// readable by Perfetto even when a crash leaves it without its closing
// bracket.
package timeline
