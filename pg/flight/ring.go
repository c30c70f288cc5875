package flight

import (
	"slices"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
)

// Note [discovered, not watched]
//
// torch's watchdog thread polls each entry's CUDA events and records
// when it discovered that the kernel started and completed. Here no
// goroutine watches: an entry's Work is polled (a non-blocking look at
// Done) when a later operation is recorded, from the oldest unfinished
// entry on until one that has not finished, and for every entry when
// the ring is dumped. time_discovered_completed_ns is therefore, as in
// torch, when the recorder noticed, not when the operation ended; and
// as torch's retire_completed does for backends without events, an
// entry found completed is marked started at the same moment unless a
// dump found it started before (markStartedLocked). An entry whose Work
// failed is retired without completing: torch's "retired but not
// completed", which is how its dumps show a timed-out collective. Recording costs a mutex, a clock read and a few
// stores; nothing runs between operations.

// entry is one recorded operation.
type entry struct {
	id                 uint64 // record_id: the ring's count of records before it
	grp                *groupInfo
	collSeq, p2pSeq    uint64
	c                  call
	created            int64 // ns since the Unix epoch
	started, completed int64 // 0 until discovered
	retired            bool
	duration           time.Duration // on the device, from the backend's events; 0: not measured
	work               pg.Work       // nil once discovered finished
}

// ring is the bounded buffer of one process's recorders.
type ring struct {
	mu      sync.Mutex
	entries []entry
	next    uint64 // record_id of the next entry
	oldest  uint64 // record_id of the oldest entry perhaps unfinished
	rank    int    // global rank, which names the dump
	groups  []*groupInfo
}

// schedule records c as scheduled and returns its record id.
func (r *ring) schedule(g *groupInfo, c call) uint64 {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discoverLocked(now, false)
	id := r.next
	r.next++
	e := &r.entries[id%uint64(len(r.entries))]
	*e = entry{id: id, grp: g, c: c, created: now}
	if c.p2p {
		g.p2pSeq++
		e.p2pSeq = g.p2pSeq
	} else {
		g.collSeq++
		e.collSeq = g.collSeq
	}
	return id
}

// attach gives entry id the Work that will say when it finished.
func (r *ring) attach(id uint64, w pg.Work) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.find(id); e != nil {
		e.work = w
	}
}

// find is entry id, or nil once the ring has overwritten it.
func (r *ring) find(id uint64) *entry {
	e := &r.entries[id%uint64(len(r.entries))]
	if e.id != id || id >= r.next {
		return nil
	}
	return e
}

// discoverLocked polls unfinished entries from the oldest on (see Note
// [discovered, not watched]): all of them if all is set, otherwise
// until the first that has not finished.
func (r *ring) discoverLocked(now int64, all bool) {
	if n := uint64(len(r.entries)); r.next > n && r.oldest < r.next-n {
		r.oldest = r.next - n // the rest were overwritten
	}
	advance := true
	for id := r.oldest; id < r.next; id++ {
		e := r.find(id)
		finished := e == nil || e.retired || e.completed != 0 || poll(e, now)
		if advance && finished {
			r.oldest = id + 1
			continue
		}
		advance = false
		if !all {
			return
		}
	}
}

// poll marks e completed or retired if its Work has finished. A Work
// whose backend knows when it ran (pg.TimedWork: pg/nccl's watchdog,
// from CUDA events) gives its own times, which mean what torch's do (see
// Note [event times]); any other is stamped now, when it was discovered.
func poll(e *entry, now int64) bool {
	if e.work == nil {
		return false // not yet attached: its call is still issuing
	}
	select {
	case <-e.work.Done():
	default:
		return false
	}
	t := pg.TimesOf(e.work)
	if !t.Started.IsZero() {
		e.started = t.Started.UnixNano()
	}
	if e.work.Err() != nil {
		e.retired = true
	} else {
		completed := now
		if !t.Completed.IsZero() {
			completed = t.Completed.UnixNano()
		}
		if e.started == 0 {
			e.started = completed
		}
		e.completed, e.retired = completed, true
		e.duration = t.Duration
	}
	e.work = nil
	return true
}

// markStartedLocked marks started, as of now, the oldest unfinished
// collective of each group from record start on: every backend runs a
// group's collectives one at a time in issue order, so the first that
// has not completed is the one the backend is in (see Note [discovered,
// not watched]). One that failed counts too, so a timed-out collective
// shows as torch shows one, started and retired but not completed.
// Point-to-point operations are not ordered so and stay scheduled.
func (r *ring) markStartedLocked(now int64, start uint64) {
	var past []*groupInfo // groups whose oldest unfinished entry was found
	for id := start; id < r.next; id++ {
		e := r.find(id)
		if e.c.p2p || e.completed != 0 || slices.Contains(past, e.grp) {
			continue
		}
		past = append(past, e.grp)
		if e.started == 0 && (e.work != nil || e.retired) {
			e.started = now
		}
	}
}

// snapshot returns copies of the ring's entries, oldest first, after
// polling every unfinished one.
func (r *ring) snapshot() ([]entry, []*groupInfo) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discoverLocked(now, true)
	start := uint64(0)
	if n := uint64(len(r.entries)); r.next > n {
		start = r.next - n
	}
	r.markStartedLocked(now, start)
	out := make([]entry, 0, r.next-start)
	for id := start; id < r.next; id++ {
		out = append(out, *r.find(id))
	}
	return out, append([]*groupInfo(nil), r.groups...)
}
