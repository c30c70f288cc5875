package tcp

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Note [one goodbye line]
//
// When a job ends, every rank closes its group. A line per peer that closed
// before this rank ("peer closed its process group") would be n(n-1) lines
// in all, most of a 64-rank job's log, all saying the one thing, that the
// job is ending. So the goodbyes are gathered: the first
// starts a short wait (goodbyeWait), and at its end, or when this rank
// closes its own group if that comes first, one line names every peer
// that said goodbye. At a normal shutdown that is one line per rank; a
// peer that leaves early while this rank goes on still gets its line
// within goodbyeWait, as news.

// goodbyeWait is how long goodbyes are gathered before they are logged.
const goodbyeWait = 2 * time.Second

// goodbyes gathers the peers that closed their groups, for one line
// (Note [one goodbye line]).
type goodbyes struct {
	log  *zap.Logger
	wait time.Duration

	mu     sync.Mutex
	peers  []int
	timer  *time.Timer // pending flush; nil when none
	closed bool
}

func newGoodbyes(log *zap.Logger, wait time.Duration) *goodbyes {
	return &goodbyes{log: log, wait: wait}
}

// note records that peer closed its group.
func (b *goodbyes) note(peer int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.peers = append(b.peers, peer)
	if b.timer == nil {
		b.timer = time.AfterFunc(b.wait, b.flush)
	}
}

// flush logs the goodbyes gathered so far, if any.
func (b *goodbyes) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	b.logLocked()
}

func (b *goodbyes) logLocked() {
	if len(b.peers) == 0 {
		return
	}
	slices.Sort(b.peers)
	msg := "peer closed its process group"
	if len(b.peers) > 1 {
		msg = fmt.Sprintf("%d peers closed their process groups", len(b.peers))
	}
	b.log.Info(msg, zap.String("peers", rankRanges(b.peers)))
	b.peers = b.peers[:0]
}

// close logs what is gathered and stops: this rank's group is closed.
func (b *goodbyes) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.logLocked()
}

// rankRanges formats sorted ranks compactly: "0-3, 5, 7-9".
func rankRanges(ranks []int) string {
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ranks[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
