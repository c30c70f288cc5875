package ft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// torchft's defaults (src/lighthouse.rs, LighthouseOpt).
const (
	DefaultJoinTimeout      = 60 * time.Second // join_timeout_ms 60000
	DefaultQuorumTick       = 100 * time.Millisecond
	DefaultHeartbeatTimeout = 5 * time.Second
)

// ErrClosed is returned by a Join on a closed Lighthouse.
var ErrClosed = errors.New("ft: lighthouse closed")

// Options configure a Lighthouse. Start from DefaultOptions: the fields
// are taken as they are (a zero JoinTimeout means no wait for stragglers,
// as torchft's join_timeout_ms 0).
type Options struct {
	MinReplicas      int           // the fewest replica groups a new quorum may have (torchft's min_replicas, required)
	JoinTimeout      time.Duration // how long a valid quorum waits for healthy replicas that have not asked
	QuorumTick       time.Duration // how often Run checks for a quorum
	HeartbeatTimeout time.Duration // a replica silent this long is not healthy

	Now        func() time.Time      // the clock; nil is time.Now
	Logger     *zap.Logger           // nil logs nothing
	Registerer prometheus.Registerer // nil registers no metrics
}

// DefaultOptions are torchft's defaults with minReplicas.
func DefaultOptions(minReplicas int) Options {
	return Options{MinReplicas: minReplicas, JoinTimeout: DefaultJoinTimeout, QuorumTick: DefaultQuorumTick,
		HeartbeatTimeout: DefaultHeartbeatTimeout}
}

func (o Options) validate() error {
	switch {
	case o.MinReplicas < 1:
		return fmt.Errorf("ft: MinReplicas is %d; it must be at least 1", o.MinReplicas)
	case o.JoinTimeout < 0:
		return fmt.Errorf("ft: JoinTimeout is %v; it must not be negative", o.JoinTimeout)
	case o.QuorumTick <= 0 || o.HeartbeatTimeout <= 0:
		return fmt.Errorf("ft: QuorumTick (%v) and HeartbeatTimeout (%v) must be positive", o.QuorumTick,
			o.HeartbeatTimeout)
	}
	return nil
}

// round is one quorum to come: done is closed when q is formed, so every
// Join waiting on it reads the same quorum (torchft's broadcast channel).
type round struct {
	done chan struct{}
	q    Quorum
}

// Lighthouse is the quorum state machine, torchft's Lighthouse without
// its network: replicas Heartbeat and Join, and a quorum is formed by
// Tick (Run calls it every QuorumTick; Join calls it at once, as
// torchft's proactive tick). It is safe for concurrent use.
type Lighthouse struct {
	opt     Options
	log     *zap.Logger
	metrics *metrics

	mu         sync.Mutex
	s          state
	quorumID   int64
	next       *round
	lastReason string
	closed     chan struct{}
	closeOnce  sync.Once
}

// NewLighthouse returns a Lighthouse with opt, or opt's error.
func NewLighthouse(opt Options) (*Lighthouse, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	log := opt.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m, err := newMetrics(opt.Registerer)
	if err != nil {
		return nil, err
	}
	return &Lighthouse{opt: opt, log: log, metrics: m, s: newState(), next: &round{done: make(chan struct{})},
		closed: make(chan struct{})}, nil
}

// Heartbeat records that replicaID is alive now.
func (l *Lighthouse) Heartbeat(replicaID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.heartbeats[replicaID] = l.opt.Now()
}

// Join asks for the next quorum for m and waits until one that holds m
// is formed, ctx ends (ctx's error) or the Lighthouse is closed
// (ErrClosed). A request is an implicit heartbeat. As in torchft, a
// quorum formed without m (it arrived late, or ShrinkOnly kept it out)
// makes m a participant again for the one after. A Join that gives up
// withdraws m, unless m has asked again since. Only the request itself is
// a heartbeat, not its waiting: a replica frozen (SIGSTOP, a long pause)
// with a request open must not stay healthy through it, or every quorum
// would wait on it.
func (l *Lighthouse) Join(ctx context.Context, m Member) (Quorum, error) {
	if m.ReplicaID == "" {
		return Quorum{}, errors.New("ft: a member needs a replica id")
	}
	l.mu.Lock()
	l.s.heartbeats[m.ReplicaID] = l.opt.Now()
	r, joined := l.participate(m)
	l.tickLocked()
	l.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			l.withdraw(m.ReplicaID, joined)
			return Quorum{}, ctx.Err()
		case <-l.closed:
			return Quorum{}, ErrClosed
		case <-r.done:
		}
		if r.q.Has(m.ReplicaID) {
			return r.q, nil
		}
		l.log.Debug("replica not in quorum, retrying", zap.String("replica", m.ReplicaID), zap.Int64("quorum", r.q.ID))
		l.mu.Lock()
		r, joined = l.participate(m)
		l.mu.Unlock()
	}
}

// participate makes m a participant now and returns the round it waits
// for; l.mu is held.
func (l *Lighthouse) participate(m Member) (*round, time.Time) {
	now := l.opt.Now()
	l.s.participants[m.ReplicaID] = participant{member: m, joined: now}
	return l.next, now
}

// withdraw removes replicaID's request of joined, if it is still there.
func (l *Lighthouse) withdraw(replicaID string, joined time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.s.participants[replicaID]; ok && p.joined.Equal(joined) {
		delete(l.s.participants, replicaID)
	}
}

// Tick forms a quorum if the rules allow one now.
func (l *Lighthouse) Tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tickLocked()
}

// Run calls Tick every QuorumTick until ctx ends or l is closed.
func (l *Lighthouse) Run(ctx context.Context) {
	t := time.NewTicker(l.opt.QuorumTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.closed:
			return
		case <-t.C:
			l.Tick()
		}
	}
}

// Close ends every waiting Join with ErrClosed, and Run.
func (l *Lighthouse) Close() { l.closeOnce.Do(func() { close(l.closed) }) }
