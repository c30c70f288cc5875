package ft

import (
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"
)

// tickLocked is torchft's _quorum_tick: form the quorum compute allows,
// bump the id when its members changed or one reports commit failures,
// hand it to every waiting Join and start the next round; l.mu is held.
func (l *Lighthouse) tickLocked() {
	now := l.opt.Now()
	members, ok, reason := compute(now, &l.s, &l.opt)
	if reason != l.lastReason {
		l.log.Debug("quorum status: "+reason, zap.Int64("quorum_id", l.quorumID)) // it flaps every step
		l.lastReason = reason
	}
	if !ok {
		return
	}
	var failed []string
	for _, m := range members {
		if m.CommitFailures > 0 {
			failed = append(failed, m.ReplicaID)
		}
	}
	level := zap.DebugLevel // a quorum every step; Info when its id changes
	switch {
	case l.s.prev == nil || !sameIDs(members, l.s.prev.Members):
		level = zap.InfoLevel
		l.quorumID++
		l.log.Info("quorum changed", zap.Int64("quorum_id", l.quorumID))
	case len(failed) > 0:
		level = zap.InfoLevel
		l.quorumID++
		l.log.Info("commit failures, new quorum id", zap.Strings("replicas", failed), zap.Int64("quorum_id", l.quorumID))
	}
	q := Quorum{ID: l.quorumID, Members: members, Created: now}
	l.log.Log(level, "quorum", zap.Int64("quorum_id", q.ID), zap.Strings("members", q.IDs()),
		zap.Int64("max_step", q.MaxStep()), zap.String("status", reason))
	l.s.prev = &q
	clear(l.s.participants)
	r := l.next
	r.q = q
	l.next = &round{done: make(chan struct{})}
	close(r.done)
	l.metrics.formed(q)
}

// Status is a snapshot of a Lighthouse, what torchft's status page shows.
type Status struct {
	QuorumID     int64             `json:"quorum_id"`
	Prev         *Quorum           `json:"prev_quorum,omitempty"` // the last quorum formed
	Reason       string            `json:"quorum_status"`         // why a quorum would (not) form now
	Participants []string          `json:"participants"`          // replica ids waiting, sorted
	Heartbeats   map[string]string `json:"heartbeats"`            // replica id -> age of its last heartbeat
	Healthy      []string          `json:"healthy"`               // sorted
}

// Status returns l's state now.
func (l *Lighthouse) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opt.Now()
	_, _, reason := compute(now, &l.s, &l.opt)
	st := Status{QuorumID: l.quorumID, Reason: reason, Heartbeats: map[string]string{},
		Participants: []string{}, Healthy: []string{}}
	if l.s.prev != nil {
		p := *l.s.prev
		p.Members = slices.Clone(p.Members)
		st.Prev = &p
	}
	for id := range l.s.participants {
		st.Participants = append(st.Participants, id)
	}
	for id, t := range l.s.heartbeats {
		age := now.Sub(t)
		st.Heartbeats[id] = age.Round(time.Millisecond).String()
		if age < l.opt.HeartbeatTimeout {
			st.Healthy = append(st.Healthy, id)
		}
	}
	sort.Strings(st.Participants)
	sort.Strings(st.Healthy)
	return st
}
