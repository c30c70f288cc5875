package reducer

// What an engine wrapper (the root package's Gorgonia wrapper, or any
// other autodiff engine's) needs beyond Prepare, MarkReady and Finalize:
// the options in effect, marks for the observed timings, and a way to
// fail the reducer when backward itself fails.

// Options returns the options in effect, defaults filled in.
func (r *Reducer) Options() Options { return r.opts }

// Params returns the parameters' descriptions, in the order New got them.
// The caller must not modify them.
func (r *Reducer) Params() []Param { return r.params }

// Observing reports whether the reducer records timings (a Registerer or a
// Timeline was given). Engines then call MarkBackwardStart and
// MarkBackwardEnd; otherwise those marks cost nothing and may be skipped.
func (r *Reducer) Observing() bool { return r.obs.on() }

// MarkBackwardStart stamps the start of backward for the observed
// timings. It is safe from any goroutine; only the first call of an
// iteration counts.
func (r *Reducer) MarkBackwardStart() { r.obs.backwardStarted() }

// MarkBackwardEnd stamps the end of backward, when the engine's backward
// pass returns.
func (r *Reducer) MarkBackwardEnd() { r.markBackwardEnd() }

// Fail puts the reducer in its failed state with err, which every later
// call returns, and returns err. An engine calls it when backward itself
// fails mid-iteration, leaving this rank out of step with its peers.
func (r *Reducer) Fail(err error) error { return r.fatal(err) }
