package ft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// Stateful is the training state a Manager recovers a replica with: the
// parameters, the optimizer's state, the schedule and the data position,
// encoded as the application likes. A Manager calls Snapshot on an
// up-to-date replica when a peer must heal from it, and Restore on the
// healing replica with those bytes.
type Stateful interface {
	// Snapshot encodes the state as it is now, at the start of the step
	// the Manager is at (before its update).
	Snapshot() ([]byte, error)
	// Restore replaces the state with a peer's Snapshot, taken at step.
	Restore(step int64, b []byte) error
}

// GroupConfig is what a Connector needs to join one quorum's process
// group across the replica groups.
type GroupConfig struct {
	QuorumID     int64
	Rank, Size   int    // this replica's index among the quorum's members, and their number
	StoreAddress string // the primary's store: the rendezvous
	Prefix       string // the quorum's keys in that store, unique per quorum id
}

// Connector joins the process group of one quorum. ctx bounds the
// rendezvous.
type Connector func(ctx context.Context, c GroupConfig) (pg.ProcessGroup, error)

// ManagerOptions configure NewManager. ReplicaID, Lighthouse, Secret,
// ListenAddr, Connect and State are required.
type ManagerOptions struct {
	ReplicaID  string
	Lighthouse *Client
	// Secret is the job's: it signs the recovery requests between
	// replicas, and the store's connections.
	Secret []byte
	// ListenAddr is where the replica's recovery server and store listen:
	// "127.0.0.1:0" on one host, "10.0.0.5:0" or ":0" across hosts.
	ListenAddr string
	// AdvertiseHost is the host peers dial for this replica's servers;
	// empty means the listener's own address, which must then not be the
	// unspecified address.
	AdvertiseHost string
	Connect       Connector
	State         Stateful
	// NoInitSync turns torchft's init_sync off: at step 0 every member
	// keeps its own weights instead of healing from the primary.
	NoInitSync bool
	// OrderedSum reduces by gathering every member's values and summing
	// them in member order, so a one-process replay of the recorded
	// participant sets is bitwise the replicas' state: the members' times
	// the bytes of an allreduce. Default: the group's allreduce.
	OrderedSum bool
	// Timeout bounds each quorum request, each rendezvous and each
	// recovery. Default DefaultManagerTimeout.
	Timeout time.Duration
	// HeartbeatInterval is how often the manager heartbeats; default
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// ChunkBytes is the size of one recovery chunk; default 4 MiB.
	ChunkBytes int
	// Step is the committed step the replica starts at (0 for a new one).
	Step int64
	// Logger receives quorum changes, recoveries and discarded steps, with
	// the fields the caller gave it (the replica id, say); nil logs nothing.
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// DefaultManagerTimeout bounds a Manager's quorum requests, rendezvous
// and recoveries by default: torchft's Manager timeout is 60 s too.
const DefaultManagerTimeout = 60 * time.Second

// StepInfo is what Start tells the replica about the step it begins.
type StepInfo struct {
	Step     int64 // the committed steps so far: the step this one will be if it commits
	QuorumID int64
	// Participants are the replica ids that contribute gradients: the
	// members at the quorum's max step, in replica-id order. A healing
	// member is in the quorum's group but not among them.
	Participants []string
	// Rank is this replica's index among Participants, -1 while it heals:
	// a healing replica reads no data this step and contributes zeros.
	Rank         int
	Healing      bool
	Serving      int  // the healing members this replica serves its state to this step
	Reconfigured bool // the process group was rebuilt for this step
	Members      int  // the quorum's members, the group's size
}

// Outcome is what Commit decided.
type Outcome struct {
	Committed bool
	Step      int64 // the committed steps after the decision
	// Chain is the commit chain after the decision and Parent the one the
	// step extended (Note [the commit chain]): a record of the run follows
	// Parent from the last step's Chain back to the first's "".
	Chain, Parent string
	Info          StepInfo
	Err           error // why the step was discarded, when it was
}

// Manager is one replica's side of fault-tolerant training, torchft's
// Manager: it makes every step a transaction over the replicas of a
// quorum (Note [the step as a transaction]). It is not safe for
// concurrent use, except that AllReduce and the hook may run on several
// goroutines at once.
type Manager struct {
	o     ManagerOptions
	log   *zap.Logger
	met   *managerMetrics
	store *store.Server
	rec   *recoveryServer

	hbCancel context.CancelFunc
	hbDone   chan struct{}

	step           int64
	chain          string // Note [the commit chain] (results.go)
	commitFailures int64
	quorumID       int64
	group          pg.ProcessGroup
	groupKey       string // membersKey of the quorum group was built for
	broken         bool   // the group failed a collective: rebuild it at the next quorum
	inStep         bool
	info           StepInfo
	participantIdx []int // the members that are participants, by group rank
	heal           *healing

	errMu  sync.Mutex
	stepEr error // the first failure of the step in progress

	stats ManagerStats
}

// ManagerStats are a Manager's counts since NewManager.
type ManagerStats struct {
	Committed, Discarded int64
	ParticipantsSum      int64 // summed over committed steps
	QuorumChanges        int64
	Recoveries           int64 // states this replica restored from a peer
	FailedRecoveries     int64 // recoveries that failed (the source died, a digest did not match)
	RecoveredBytes       int64
	RecoveryTime         time.Duration
	Served               int64 // snapshots this replica served to healing peers
}

// NewManager starts a replica's manager: its store and recovery server on
// o.ListenAddr, and its heartbeats to the lighthouse, until Close.
func NewManager(ctx context.Context, o ManagerOptions) (*Manager, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	m := &Manager{o: o, log: o.Logger, step: o.Step,
		info: StepInfo{Rank: -1}}
	var err error
	if m.met, err = newManagerMetrics(o.Registerer); err != nil {
		return nil, err
	}
	if m.store, err = store.NewServer(ctx, store.ServerOptions{Addr: o.ListenAddr, Secret: o.Secret,
		Logger: o.Logger}); err != nil {
		return nil, fmt.Errorf("ft: the replica's store: %w", err)
	}
	if m.rec, err = startRecoveryServer(ctx, o.ListenAddr, o.Secret, o.ChunkBytes, m.log); err != nil {
		m.store.Close()
		return nil, err
	}
	hbCtx, cancel := context.WithCancel(context.Background())
	m.hbCancel, m.hbDone = cancel, make(chan struct{})
	go func() {
		defer close(m.hbDone)
		_ = o.Lighthouse.Heartbeats(hbCtx, o.HeartbeatInterval) // retries a lighthouse that is down
	}()
	return m, nil
}

func (o ManagerOptions) check() error {
	switch {
	case o.ReplicaID == "":
		return errors.New("ft: ManagerOptions.ReplicaID is empty")
	case o.Lighthouse == nil:
		return errors.New("ft: ManagerOptions.Lighthouse is nil")
	case o.ListenAddr == "":
		return errors.New("ft: ManagerOptions.ListenAddr is empty; listen addresses are explicit (127.0.0.1:0)")
	case o.Connect == nil:
		return errors.New("ft: ManagerOptions.Connect is nil (TCPConnector makes one)")
	case o.State == nil:
		return errors.New("ft: ManagerOptions.State is nil: a replica must be able to serve its state")
	case o.Step < 0:
		return fmt.Errorf("ft: ManagerOptions.Step is %d", o.Step)
	}
	return checkSecret(o.Secret)
}

func (o ManagerOptions) withDefaults() ManagerOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultManagerTimeout
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// advertise is addr with AdvertiseHost's host, if set.
func (m *Manager) advertise(addr string) string {
	if m.o.AdvertiseHost == "" {
		return addr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(m.o.AdvertiseHost, port)
}

// Step is the number of committed steps.
func (m *Manager) Step() int64 { return m.step }

// CommitChain is the replica's commit chain (Note [the commit chain]).
func (m *Manager) CommitChain() string { return m.chain }

// Stats are the Manager's counts so far.
func (m *Manager) Stats() ManagerStats { return m.stats }

// Close ends the heartbeats, the process group and the servers.
func (m *Manager) Close() error {
	m.hbCancel()
	<-m.hbDone
	if m.heal != nil {
		m.heal.cancel()
		<-m.heal.done
		m.heal = nil
	}
	var errs []error
	if m.group != nil {
		errs = append(errs, m.group.Close())
		m.group = nil
	}
	errs = append(errs, m.rec.Close(), m.store.Close())
	return errors.Join(errs...)
}

// fail records the step's first failure.
func (m *Manager) fail(err error) {
	if err == nil {
		return
	}
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if m.stepEr == nil {
		m.stepEr = err
	}
}

// failure is the step's first failure, if any.
func (m *Manager) failure() error {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.stepEr
}

// Hook is a comm hook that averages each bucket over the step's
// participants through m.AllReduce, whatever group the reducer passes: a
// failure is recorded for Commit, and the bucket completes (with values
// that Commit will refuse to apply), so that backward ends normally.
func (m *Manager) Hook() commhook.Hook {
	return ftHook{m}
}

type ftHook struct{ m *Manager }

func (h ftHook) Name() string { return "fault-tolerant" }

func (h ftHook) Run(ctx context.Context, _ pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	_ = h.m.AllReduce(ctx, b.Buffer)
	return pg.Completed(nil)
}
