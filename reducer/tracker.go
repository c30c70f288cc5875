package reducer

// tracker is the reducer's bookkeeping as a plain state machine: which
// parameters are ready this iteration, which buckets are complete, and
// which bucket launches next. It holds no goroutines, clocks or
// collectives; the Reducer feeds it events and carries out what it says.
//
// Note [launch order]: buckets launch strictly in index order. A complete
// bucket waits until every earlier bucket has launched. Since every rank
// has the same buckets, every rank then issues its collectives in the same
// order, whatever order its gradients became ready in.
type tracker struct {
	bucketOf []int  // parameter -> bucket
	pending  []int  // bucket -> parameters not yet ready this iteration
	sizes    []int  // bucket -> number of parameters
	ready    []bool // parameter -> marked ready this iteration
	next     int    // the next bucket to launch
	numReady int
}

func newTracker(buckets [][]int, numParams int) *tracker {
	t := &tracker{
		bucketOf: make([]int, numParams),
		pending:  make([]int, len(buckets)),
		sizes:    make([]int, len(buckets)),
		ready:    make([]bool, numParams),
	}
	for b, params := range buckets {
		t.sizes[b] = len(params)
		for _, p := range params {
			t.bucketOf[p] = b
		}
	}
	t.reset()
	return t
}

// reset starts a new iteration: nothing ready, nothing launched.
func (t *tracker) reset() {
	copy(t.pending, t.sizes)
	clear(t.ready)
	t.next = 0
	t.numReady = 0
}

// isReady reports whether parameter i has been marked ready.
func (t *tracker) isReady(i int) bool { return t.ready[i] }

// markReady records that parameter i is ready and returns the range of
// buckets [from, to) that may now launch. It reports false if i was
// already ready this iteration.
func (t *tracker) markReady(i int) (from, to int, ok bool) {
	if t.ready[i] {
		return 0, 0, false
	}
	t.ready[i] = true
	t.numReady++
	t.pending[t.bucketOf[i]]--
	from = t.next
	for t.next < len(t.pending) && t.pending[t.next] == 0 {
		t.next++
	}
	return from, t.next, true
}

// allLaunched reports whether every bucket has launched.
func (t *tracker) allLaunched() bool { return t.next == len(t.pending) }

// missing lists, ascending, the parameters not marked ready.
func (t *tracker) missing() []int {
	var out []int
	for i, r := range t.ready {
		if !r {
			out = append(out, i)
		}
	}
	return out
}

// markOnly records that i is ready without completing buckets: for
// iterations that communicate at Finalize, or not at all.
func (t *tracker) markOnly(i int) {
	if !t.ready[i] {
		t.ready[i] = true
		t.numReady++
	}
}
