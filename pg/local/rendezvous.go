package local

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Note [Matching by sequence number]
//
// Every rank numbers its collectives in issue order. Collective s of every
// rank meets in slot s of the shared world, whatever order the ranks'
// workers get there in. A slot settles exactly once, under world.mu:
//
//   - ready, when the last rank arrives and every rank described the same
//     collective; from then on each rank works on its peers' buffers;
//   - broken, when that cannot happen: ranks disagree (a mismatch), a rank
//     gave up waiting (timeout or ctx), or a rank left the group (Close or
//     Abort). A broken slot stays broken, so a rank that arrives late fails
//     at once instead of waiting for peers that are gone.
//
// Because a slot can only become ready in arrive, and leave breaks every
// slot that is not yet ready, no rank ever touches a buffer of a rank that
// has given up on it.

// Note [The departure barrier has no timeout]
//
// Once a slot is ready, every rank in it only computes (no waiting) and
// then departs, even a rank whose group is being closed: the worker checks
// for Close only between collectives. So the wait for the last departure
// is bounded by the slowest rank's share of the arithmetic, and a timeout
// there could only free a buffer that a peer is still writing.

// world is the state the ranks of one New call, or of one subgroup, share.
type world struct {
	n      int
	parent []int // rank r's rank in the parent group; nil for New's worlds
	mu     sync.Mutex
	slots  map[uint64]*slot
	gone   []string // why rank r left the group; "" while it is a member
	mail   mailbox  // pending Sends and Recvs
}

func newWorld(n int, parent []int) *world {
	return &world{n: n, parent: parent, slots: make(map[uint64]*slot), gone: make([]string, n), mail: make(mailbox)}
}

// name is how errors name rank r: with its parent rank in a subgroup.
func (w *world) name(r int) string {
	if w.parent == nil {
		return fmt.Sprintf("rank %d", r)
	}
	return fmt.Sprintf("rank %d (rank %d of the parent group)", r, w.parent[r])
}

// names is how errors name ranks.
func (w *world) names(rs []int) string {
	if w.parent == nil {
		return fmt.Sprintf("ranks %v", rs)
	}
	ps := make([]int, len(rs))
	for i, r := range rs {
		ps[i] = w.parent[r]
	}
	return fmt.Sprintf("ranks %v (ranks %v of the parent group)", rs, ps)
}

// slot is where collective number seq of every rank meets.
type slot struct {
	seq      uint64
	descs    []desc
	args     []args
	here     []bool // rank r has arrived
	released []bool // rank r is done with the slot
	arrived  int
	settled  bool
	settle   chan struct{} // closed when settled: ready (fail == nil) or broken
	subs     []subResult   // new_group and Split: rank r's subgroup
	fail     failure
	departed int
	left     chan struct{} // closed when every rank has departed
}

func newSlot(seq uint64, n int) *slot {
	return &slot{
		seq: seq, descs: make([]desc, n), args: make([]args, n),
		here: make([]bool, n), released: make([]bool, n),
		settle: make(chan struct{}), left: make(chan struct{}),
	}
}

// breakWith settles s as failed. Callers hold world.mu.
func (s *slot) breakWith(f failure) {
	s.settled, s.fail = true, f
	close(s.settle)
}

// missing lists the ranks that have not arrived. Callers hold world.mu.
func (s *slot) missing() []int {
	var m []int
	for r, ok := range s.here {
		if !ok {
			m = append(m, r)
		}
	}
	return m
}

// arrive enters rank r into slot seq. It returns the slot and, when the
// slot had already broken before r arrived, why.
func (w *world) arrive(r int, seq uint64, d desc, a args) (*slot, failure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone[r] != "" {
		return nil, goneFailure{peer: r, reason: w.gone[r]}
	}
	s := w.slots[seq]
	if s == nil {
		s = newSlot(seq, w.n)
		w.slots[seq] = s
	}
	if s.settled {
		return s, s.fail
	}
	s.here[r], s.descs[r], s.args[r] = true, d, a
	s.arrived++
	if j := w.firstGone(); j >= 0 {
		s.breakWith(goneFailure{peer: j, reason: w.gone[j]})
	} else if f := s.mismatch(r); f != nil {
		s.breakWith(f)
	} else if s.arrived == w.n {
		if d.kind == opNewGroup || d.kind == opSplit {
			s.subs = makeSubworlds(s.args, d.kind)
		}
		s.settled = true
		close(s.settle)
	}
	return s, nil
}

func (w *world) firstGone() int {
	for r, why := range w.gone {
		if why != "" {
			return r
		}
	}
	return -1
}

// mismatch compares r's description with that of another rank already in
// s (all of which agree, or s would have broken), and what desc does not
// hold with every rank that disagree needs. Callers hold world.mu.
func (s *slot) mismatch(r int) failure {
	if s.descs[r].kind == opAllToAll {
		if msg := splitsDisagree(r, r, s.args[r], s.args[r]); msg != "" {
			return detailFailure{seq: s.seq, a: r, b: r, msg: msg, kind: opAllToAll}
		}
	}
	for a, ok := range s.here {
		if ok && a != r {
			if s.descs[a] != s.descs[r] {
				return mismatchFailure{seq: s.seq, a: a, b: r, da: s.descs[a], db: s.descs[r]}
			}
			if msg := disagree(s.descs[r].kind, a, r, s.args[a], s.args[r]); msg != "" {
				return detailFailure{seq: s.seq, a: a, b: r, msg: msg, kind: s.descs[r].kind}
			}
			if s.descs[r].kind != opAllToAll {
				return nil // agreement is transitive
			}
		}
	}
	return nil
}

// await waits until s settles, r's timeout passes or ctx ends, and returns
// nil when s is ready.
func (w *world) await(ctx context.Context, s *slot, r int, timeout time.Duration) failure {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	start := time.Now()
	select {
	case <-s.settle:
		return s.fail
	case <-timer.C:
		return w.giveUp(s, r, time.Since(start), nil)
	case <-ctx.Done():
		return w.giveUp(s, r, time.Since(start), context.Cause(ctx))
	}
}

// giveUp breaks s on behalf of r unless it settled in the meantime, in
// which case r goes on with the slot's outcome.
func (w *world) giveUp(s *slot, r int, waited time.Duration, cause error) failure {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.settled {
		return s.fail
	}
	missing := s.missing()
	var f failure = timeoutFailure{by: r, missing: missing, names: w.names(missing), waited: waited}
	if cause != nil {
		f = cancelFailure{by: r, missing: missing, names: w.names(missing), cause: cause}
	}
	s.breakWith(f)
	return f
}

// depart waits until every rank has finished its part of the ready slot s.
// See Note [The departure barrier has no timeout].
func (w *world) depart(s *slot) {
	w.mu.Lock()
	s.departed++
	if s.departed == w.n {
		close(s.left)
	}
	w.mu.Unlock()
	<-s.left
}

// release records that r is done with s and forgets s once every rank is
// done with it or will never come. s may be nil.
func (w *world) release(s *slot, r int) {
	if s == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s.released[r] = true
	w.forget(s)
}

// forget drops s from the world once no rank can still use it. Callers
// hold world.mu.
func (w *world) forget(s *slot) {
	for r := range w.n {
		if !s.released[r] && (w.gone[r] == "" || s.here[r]) {
			return
		}
	}
	delete(w.slots, s.seq)
}

// leave removes rank r from the group: every slot that is not yet ready
// breaks, naming r, and so does every later one.
func (w *world) leave(r int, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone[r] != "" {
		return
	}
	w.gone[r] = why
	w.mail.leave(r, why)
	for _, s := range w.slots {
		if !s.settled {
			s.breakWith(goneFailure{peer: r, reason: why})
		}
		w.forget(s)
	}
}
