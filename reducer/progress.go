package reducer

// Progress is where the iteration in progress stands, for a debug
// endpoint or a stall report: what the machine's phase is, and how far
// backward and communication have come.
type Progress struct {
	Phase      string // idle, busy (Prepare or Finalize at work), local, counting, syncing, failed
	BusyIn     string // with Phase busy: "Prepare" or "Finalize"
	Iterations int    // synchronised iterations completed
	Ready      int    // parameters marked ready in this iteration
	Params     int
	Launched   int // buckets launched in this iteration, in order
	Buckets    int
	Err        string // with Phase failed: the first fatal error
}

// Progress reports the iteration in progress. It is read-only, and
// answers at once while Prepare or Finalize waits (Note [no lock across a
// wait]).
func (r *Reducer) Progress() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.m.status()
	p := Progress{Phase: s.phase.String(), Iterations: s.iterations, Ready: s.ready, Params: s.params,
		Launched: s.launched, Buckets: s.buckets}
	if s.phase == phaseBusy {
		p.BusyIn = s.busyIn
	}
	if s.phase == phaseFailed && s.err != nil {
		p.Err = s.err.Error()
	}
	return p
}
