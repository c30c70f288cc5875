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
	m := r.m
	p := Progress{Phase: m.phase.String(), Iterations: m.num, Ready: m.t.numReady, Params: len(m.params),
		Launched: m.t.next, Buckets: len(m.t.pending)}
	if m.phase == phaseBusy {
		p.BusyIn = m.busyIn
	}
	if m.phase == phaseFailed && m.err != nil {
		p.Err = m.err.Error()
	}
	return p
}
