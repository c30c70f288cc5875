package shedlog

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Note [rate-limited refusals]
//
// A port scanner, a health checker or a stray job can open thousands of
// connections a second to the store port, each of which the server
// refuses or drops. One Warn line each would bury the job's own log (tens
// of thousands of lines during one rendezvous, a line per connection to a
// rank's port). So the first
// refusal after a quiet spell is logged at once, with its reason and
// remote address, as a misconfigured rank needs; the next ones in the
// interval are only counted, and one summary line at the end of the
// interval (or at Close) says how many were refused, why, and from which
// hosts. At most two lines per interval, whatever the rate.

// Log logs the connections a server refuses or drops, rate-limited
// (Note [rate-limited refusals]). It is safe for concurrent use.
type Log struct {
	log    *zap.Logger
	prefix string // before each message: "store: "
	every  time.Duration
	count  atomic.Int64 // every connection noted, ever

	mu      sync.Mutex
	until   time.Time      // end of the current interval; zero when quiet
	total   int            // refusals counted in the interval
	reasons map[string]int // by reason
	hosts   map[string]int // by remote host
	timer   *time.Timer    // flushes the interval; nil when none is pending
	closed  bool
}

// New logs to log (nil: nowhere), each message after prefix, a summary
// at most every interval.
func New(log *zap.Logger, prefix string, every time.Duration) *Log {
	if log == nil {
		log = zap.NewNop()
	}
	return &Log{log: log, prefix: prefix, every: every, reasons: make(map[string]int), hosts: make(map[string]int)}
}

// Count is how many connections were noted, ever.
func (l *Log) Count() int64 { return l.count.Load() }

// Note records one refused or dropped connection from remote: reason is
// a short class ("it failed the shared-secret handshake"), err the
// details, logged only for the first of an interval.
func (l *Log) Note(reason, remote string, err error) {
	l.count.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := time.Now()
	if now.After(l.until) {
		l.until = now.Add(l.every)
		l.log.Warn(l.prefix+"refused connection: "+reason, zap.String("remote", remote), zap.Error(err),
			zap.Duration("next_report_in", l.every))
		return
	}
	l.total++
	l.reasons[reason]++
	l.hosts[hostOf(remote)]++
	if l.timer == nil {
		l.timer = time.AfterFunc(l.until.Sub(now), l.flush)
	}
}

// flush logs the interval's summary, if anything was counted, and starts
// the next interval.
func (l *Log) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	if l.closed || l.total == 0 {
		return
	}
	l.summaryLocked()
	l.until = time.Now().Add(l.every)
	l.timer = time.AfterFunc(l.every, l.flush)
}

func (l *Log) summaryLocked() {
	l.log.Warn(fmt.Sprintf("%srefused %d more connections", l.prefix, l.total),
		zap.String("reasons", TopCounts(l.reasons, 8)), zap.String("from", TopCounts(l.hosts, 8)),
		zap.Duration("within", l.every))
	l.total = 0
	clear(l.reasons)
	clear(l.hosts)
}

// Flush logs the summary of what is counted now, rather than at the end
// of the interval: a phase (a rendezvous) is over. Later refusals are
// counted as before.
func (l *Log) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.total == 0 {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.summaryLocked()
}

// Close logs what is counted and stops the log: later notes are only
// counted.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.total > 0 {
		l.summaryLocked()
	}
}

// TopCounts formats the n largest counts of m: "a: 10, b: 3, 2 others: 2".
func TopCounts(m map[string]int, n int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
	var parts []string
	rest, others := 0, 0
	for i, k := range keys {
		if i < n {
			parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
		} else {
			rest += m[k]
			others++
		}
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d others: %d", others, rest))
	}
	return strings.Join(parts, ", ")
}

// hostOf is the host part of a remote address.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
