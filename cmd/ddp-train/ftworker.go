package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/ft"
	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// The environment between the fault-tolerant launcher and its replicas
// (a replica started by hand needs only GODDP_SECRET and --lighthouse).
const (
	ftReplicaEnv    = "GODDP_FT_REPLICA_ID" // the replica's id: its identity at the lighthouse
	ftLighthouseEnv = "GODDP_FT_LIGHTHOUSE" // the launcher's lighthouse
	ftOutEnv        = "GODDP_FT_OUT"        // where the replica leaves its outputs for the launcher
)

// Note [a fault-tolerant replica]: each replica is one process with a
// group of one rank of its own (the design leaves room for a replica that
// is a DDP group: its ranks would each average their shard across the
// replicas). Its step (ftStep) is ddp-train's step made a transaction by
// an ft.Manager (Note [the step as a transaction], package ft):
//
//   - Start: the quorum, the group across the replicas, a recovery if
//     this replica is behind.
//   - Data: the committed steps have consumed B batches of the one-rank
//     sampler's order (the whole data set, --shuffle by --seed per epoch).
//     The participant of rank k among n reads batch B+k; a healing replica
//     contributes zeros. On commit B grows by n, so every batch is in
//     exactly one committed step, whatever was discarded (--ft-record
//     says which replica took which).
//   - Backward on the replica's batch, then all gradients in one buffer
//     averaged over the participants (no overlap with backward: a bucket
//     order that a fresh replica would rebuild differently must not
//     reach the wire).
//   - Commit: only then the update (clipping, the schedule, the
//     optimizer), and the schedule and data position advance.
//
// The state a healing peer receives (ftState) is the parameters, the
// optimizer's state, the schedule and the data position, at the step.

// runFTWorker is one replica of a fault-tolerant run.
func runFTWorker(ctx context.Context, c config, id string, lookup func(string) (string, bool), stdout,
	stderr io.Writer) error {
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	logger = logger.With(zap.String("replica_id", id))
	secret, err := ftSecret(lookup)
	if err != nil {
		return err
	}
	lh := c.ftLighthouse
	if v, ok := lookup(ftLighthouseEnv); ok {
		lh = v
	}
	if lh == "" {
		return usagef("--fault-tolerant replica %s: no lighthouse; give --lighthouse HOST:PORT", id)
	}
	if out, ok := lookup(ftOutEnv); ok {
		life, _ := lookup("GODDP_FT_LIFE")
		c = ftOutputs(c, filepath.Join(out, id), life)
	}
	ds, err := loadData(c)
	if err != nil {
		return err
	}
	groups, err := local.New(1, local.Options{Timeout: c.timeout})
	if err != nil {
		return err
	}
	defer groups[0].Close()
	t := trainer{c: c, g: groups[0], ds: ds, log: logger, out: stdout, stderr: stderr, buildMu: new(sync.Mutex)}
	if err := t.runFT(ctx, id, lh, secret); err != nil {
		return fmt.Errorf("replica %s: %w", id, err)
	}
	return nil
}

// ftSecret is GODDP_SECRET, which signs the lighthouse's requests, the
// recoveries and the groups' connections.
func ftSecret(lookup func(string) (string, bool)) ([]byte, error) {
	v, ok := lookup("GODDP_SECRET")
	if !ok || v == "" {
		return nil, usagef("--fault-tolerant: GODDP_SECRET is not set; every replica and the lighthouse need the " +
			"job's secret (e.g. GODDP_SECRET=$(openssl rand -hex 32))")
	}
	b, err := ft.DecodeSecret(v)
	if err != nil {
		return nil, usageError{err}
	}
	return b, nil
}

// ftOutputs points a replica's outputs into dir, for the launcher to
// check and pick from once a replica has finished: its summary always, a
// record per life of the replica.
func ftOutputs(c config, dir, life string) config {
	c.summary = filepath.Join(dir, "summary.json")
	if c.saveDir != "" {
		c.saveDir = filepath.Join(dir, "model")
	}
	c.ftRecord = filepath.Join(dir, "record-"+life+".jsonl")
	return c
}

// runFT trains one replica (Note [a fault-tolerant replica]).
func (t *trainer) runFT(ctx context.Context, id, lighthouse string, secret []byte) error {
	s, err := t.build(ctx)
	if err != nil {
		return err
	}
	defer s.vm.Close()
	defer s.close(t.log)
	defer s.eval.close()
	total := t.totalSteps(s)
	s.total = total
	if err := s.newSchedule(t.c, total); err != nil {
		return err
	}
	s.ft = &ftState{s: s}
	if t.c.syncEvery > 0 { // Note [DiLoCo as a transaction] (ftdiloco.go)
		params, err := s.ddp.ParamTensors()
		if err != nil {
			return err
		}
		if s.ft.dl, err = newFTOuter(t.c, params); err != nil {
			return err
		}
	}
	mgr, closeMgr, err := t.newManager(ctx, id, lighthouse, secret, s.ft)
	if err != nil {
		return err
	}
	defer closeMgr()
	rec, err := newFTRecord(t.c.ftRecord)
	if err != nil {
		return err
	}
	defer rec.close()
	feed := newFeeder(t.ds, s.smp, t.c.batchSize)
	prog := newProgress(t, 0, total)
	began := time.Now()
	per := max(t.c.syncEvery, 1) // optimizer steps a transaction takes: H under DiLoCo
	for mgr.Step()*int64(per) < int64(total) {
		st, out, err := t.ftTransaction(ctx, s, feed, mgr)
		if err != nil {
			return fmt.Errorf("step %d: %w", mgr.Step()*int64(per)+1, err)
		}
		if !out.Committed {
			continue
		}
		if err := rec.add(out, s.ft.batch, per); err != nil {
			return err
		}
		if err := prog.add(ctx, int(out.Step)*per, st); err != nil {
			return err
		}
	}
	return t.endFT(ctx, s, prog, total, began, mgr)
}

// newManager starts the replica's ft.Manager, listening on --listen-addr's
// host.
func (t *trainer) newManager(ctx context.Context, id, lighthouse string, secret []byte, st *ftState) (*ft.Manager,
	func(), error) {
	client, err := ft.NewClient(lighthouse, secret, id, ft.ClientOptions{})
	if err != nil {
		return nil, nil, err
	}
	host, _, err := net.SplitHostPort(t.c.listenAddr)
	if err != nil {
		host = "127.0.0.1"
	}
	listen := net.JoinHostPort(host, "0")
	mgr, err := ft.NewManager(ctx, ft.ManagerOptions{ReplicaID: id, Lighthouse: client, Secret: secret,
		ListenAddr: listen, State: st, OrderedSum: t.c.ftOrderedSum, Timeout: t.c.ftTimeout, Logger: t.log,
		Connect: ft.TCPConnector(ft.TCPOptions{Secret: secret, ListenAddr: listen, Timeout: t.c.ftTimeout,
			NoSharedMemory: !t.c.shm, Logger: t.log})})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	st.mgr = mgr
	return mgr, func() {
		if err := mgr.Close(); err != nil {
			t.log.Debug("closing the fault-tolerant manager", zap.Error(err))
		}
		client.Close()
	}, nil
}

// ftStartTries is how many quorum requests in a row, each bounded by
// --ft-timeout, a replica makes before it gives up: a lighthouse that
// restarts within them loses nothing.
const ftStartTries = 10

// startFT starts the next step, retrying a lighthouse that does not
// answer.
func (t *trainer) startFT(ctx context.Context, mgr *ft.Manager) (ft.StepInfo, error) {
	var err error
	for try := 1; try <= ftStartTries && ctx.Err() == nil; try++ {
		var info ft.StepInfo
		if info, err = mgr.Start(ctx); err == nil {
			return info, nil
		}
		t.log.Warn("no quorum yet; asking again", zap.Int("try", try), zap.Error(err))
	}
	return ft.StepInfo{}, fmt.Errorf("no quorum in %d tries of --ft-timeout %v: %w", ftStartTries, t.c.ftTimeout, err)
}

// ftTransaction is the next step, or under DiLoCo the next round.
func (t *trainer) ftTransaction(ctx context.Context, s *session, feed *feeder, mgr *ft.Manager) (stats, ft.Outcome,
	error) {
	if s.ft.dl != nil {
		return t.ftRound(ctx, s, feed, mgr) // ftdiloco.go
	}
	info, err := t.startFT(ctx, mgr)
	if err != nil {
		return stats{}, ft.Outcome{}, err
	}
	return t.ftStep(ctx, s, feed, mgr, info)
}

// ftStep is one step as a transaction (Note [a fault-tolerant replica]).
func (t *trainer) ftStep(ctx context.Context, s *session, feed *feeder, mgr *ft.Manager, info ft.StepInfo) (stats,
	ft.Outcome, error) {
	fs := s.ft
	labels, err := feed.load(s, fs.batch+max(info.Rank, 0))
	if err != nil {
		return stats{}, ft.Outcome{}, err
	}
	defer s.vm.Reset()
	vm := &timedVM{VM: s.vm}
	start := time.Now()
	err = s.ddp.RunAll(ctx, vm)
	what, nonFinite := nonFiniteGrads(err) // Note [non-finite guard]
	if err != nil && !nonFinite {
		return stats{}, ft.Outcome{}, err
	}
	if nonFinite && !info.Healing {
		mgr.Fail(fmt.Errorf("the gradients are not finite: %s", what))
	}
	if err := fs.average(ctx, s, mgr); err != nil {
		return stats{}, ft.Outcome{}, err
	}
	loss := s.net.LossValue()
	st := stats{loss: loss, correct: s.net.Correct(labels), samples: len(labels), compute: vm.tapeEnd.Sub(start),
		comm: time.Since(vm.tapeEnd), steps: 1, lossOK: finiteLoss(loss), lr: s.sched.LR()}
	if info.Healing {
		st = stats{steps: 1, lossOK: true, lr: st.lr, compute: st.compute, comm: st.comm}
	}
	out, err := mgr.Commit(ctx)
	if err != nil || !out.Committed {
		if nonFinite && !info.Healing {
			return st, out, t.diverged(ctx, int(info.Step)+1, !st.lossOK, what)
		}
		return st, out, err
	}
	params, grads, err := s.ddp.StepTensors() // after a recovery too: the restored values
	if err != nil {
		return st, out, err
	}
	st.lr = s.sched.LR()
	if err := s.update(ctx, t.c, params, grads); err != nil { // optflags.go: clipping, the schedule, the step
		return st, out, err
	}
	fs.batch += len(info.Participants)
	return st, out, nil
}

// ftState is a replica's state as a healing peer receives it
// (ft.Stateful).
type ftState struct {
	s     *session
	mgr   *ft.Manager
	batch int       // batches the committed steps consumed
	flat  pg.Tensor // the gradients, in one buffer
	dl    *ftOuter  // --diloco-sync-every: the global parameters and the outer optimizer (ftdiloco.go)
}

// ftSnapshot is ftState's encoding.
type ftSnapshot struct {
	Step     int64
	Batch    int
	Ck       *checkpoint.Checkpoint
	Schedule optim.ScheduleState
	Global   [][]float64  // DiLoCo: the global parameters
	Outer    *optim.State // DiLoCo: the outer optimizer's state
}

func (f *ftState) Snapshot() ([]byte, error) {
	ck := checkpoint.Capture(int(f.mgr.Step()), f.s.params, f.s.opt)
	snap := ftSnapshot{Step: f.mgr.Step(), Batch: f.batch, Ck: ck, Schedule: f.s.sched.State()}
	if f.dl != nil {
		f.dl.save(&snap)
	}
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(snap)
	return b.Bytes(), err
}

func (f *ftState) Restore(step int64, b []byte) error {
	var snap ftSnapshot
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&snap); err != nil {
		return fmt.Errorf("decoding the peer's state: %w", err)
	}
	if snap.Step != step || snap.Ck == nil {
		return fmt.Errorf("the peer's state is of step %d, not %d", snap.Step, step)
	}
	if err := snap.Ck.Restore(f.s.params, f.s.opt); err != nil {
		return fmt.Errorf("the peer's state does not fit this replica (are its flags the same?): %w", err)
	}
	if err := f.s.sched.Load(snap.Schedule); err != nil {
		return err
	}
	if f.dl != nil {
		if err := f.dl.load(snap); err != nil {
			return err
		}
	}
	f.batch = snap.Batch
	return nil
}

// average replaces the gradients with their average over the step's
// participants: one buffer, one reduction.
func (f *ftState) average(ctx context.Context, s *session, mgr *ft.Manager) error {
	_, grads, err := s.ddp.StepTensors()
	if err != nil {
		return err
	}
	n := 0
	for _, g := range grads {
		n += g.Len()
	}
	if f.flat.Len() != n || len(grads) > 0 && f.flat.Dtype != grads[0].Dtype {
		f.flat = pg.NewTensor(grads[0].Dtype, n)
	}
	off := 0
	for _, g := range grads {
		copy(f.flat.Slice(off, off+g.Len()).Data, g.Data)
		off += g.Len()
	}
	_ = mgr.AllReduce(ctx, f.flat) // a failure is the step's: Commit discards it
	off = 0
	for _, g := range grads {
		copy(g.Data, f.flat.Slice(off, off+g.Len()).Data)
		off += g.Len()
	}
	return nil
}

// ftRecord is --ft-record: one JSON line per committed step.
type ftRecord struct {
	f   *os.File
	enc *json.Encoder
}

// ftRecordLine is one committed step.
type ftRecordLine struct {
	Step         int64    `json:"step"` // 1-based, as the train lines count
	QuorumID     int64    `json:"quorum_id"`
	Participants []string `json:"participants"`
	// FirstBatch is the batch the first participant took; the k-th took
	// FirstBatch+k (in the one-rank sampler's order, epoch by epoch).
	// Under DiLoCo a round's participant k took BatchesEach batches from
	// FirstBatch+k·BatchesEach.
	FirstBatch  int `json:"first_batch"`
	BatchesEach int `json:"batches_each,omitempty"`
	// Chain is the commit chain after the step and Parent the one before
	// (Note [the commit chain], package ft): the launcher follows them
	// back from the end, past any step a replica committed on a history
	// that lost.
	Chain  string `json:"chain"`
	Parent string `json:"parent"`
}

func newFTRecord(path string) (*ftRecord, error) {
	if path == "" {
		return &ftRecord{}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--ft-record: %w", err)
	}
	return &ftRecord{f: f, enc: json.NewEncoder(f)}, nil
}

// add records out, whose step has consumed the batches up to batchEnd,
// each participant per of them.
func (r *ftRecord) add(out ft.Outcome, batchEnd, per int) error {
	if r.f == nil {
		return nil
	}
	n := len(out.Info.Participants)
	l := ftRecordLine{Step: out.Step, QuorumID: out.Info.QuorumID, Participants: out.Info.Participants,
		FirstBatch: batchEnd - n*per, Chain: out.Chain, Parent: out.Parent}
	if per > 1 {
		l.BatchesEach = per
	}
	return r.enc.Encode(l)
}

func (r *ftRecord) close() {
	if r.f != nil {
		_ = r.f.Close()
	}
}

// endFT finishes a replica that committed the last step: the figures,
// the final evaluation, the outputs for the launcher.
func (t *trainer) endFT(ctx context.Context, s *session, prog *progress, total int, began time.Time,
	mgr *ft.Manager) error {
	fst := mgr.Stats()
	final, err := prog.finish(ctx)
	if err != nil {
		return err
	}
	if name, err := s.paramsFinite(); err != nil || name != "" {
		if err != nil {
			return err
		}
		return t.diverged(ctx, total, false, fmt.Sprintf("the parameter %s holds a NaN or an infinity", name))
	}
	ev, err := t.finalEval(ctx, s, prog, total) // eval.go
	if err != nil {
		return err
	}
	d := digest(s.params)
	sd := stateDigest(s)
	t.log.Info("done", zap.Int("steps", total), zap.String("state_digest", sd), zap.Int64("committed_here", fst.Committed),
		zap.Int64("discarded", fst.Discarded), zap.Int64("recoveries", fst.Recoveries), zap.String("param_digest", d))
	sum := summaryOf(t, final, int(fst.Committed), time.Since(began))
	sum.Steps, sum.Backend = total, "tcp" // the run's steps; the replicas' groups
	sum.setFT(fst, d)
	sum.StateDigest, sum.CommitChain = sd, mgr.CommitChain()
	sum.setEval(ev)
	return t.writeOutputs(s, sum) // outputs.go
}

// setFT fills the summary's fault-tolerance figures, this replica's.
func (s *summary) setFT(st ft.ManagerStats, digest string) {
	s.FaultTolerant = true
	s.CommittedSteps, s.DiscardedSteps = st.Committed, st.Discarded
	if st.Committed > 0 {
		s.ParticipantsMean = float64(st.ParticipantsSum) / float64(st.Committed)
	}
	s.Recoveries, s.RecoveredBytes, s.RecoverySeconds = st.Recoveries, st.RecoveredBytes, st.RecoveryTime.Seconds()
	s.QuorumChanges, s.ParamDigest = st.QuorumChanges, digest
}

// stateDigest hashes what every replica must hold alike: the parameters
// and the optimizer's state (buffers by name), or under DiLoCo, whose
// inner optimizers are each replica's own, the outer optimizer's.
func stateDigest(s *session) string {
	h := sha256.New()
	for _, n := range s.params.Nodes {
		if t, err := gtensor.TensorOf(n.Value()); err == nil {
			h.Write(t.Data)
		}
	}
	st := s.opt.State()
	if s.ft != nil && s.ft.dl != nil {
		st = s.ft.dl.outer.State()
	}
	fmt.Fprintf(h, "%s %d", st.Name, st.Step)
	for _, k := range slices.Sorted(maps.Keys(st.Buffers)) {
		fmt.Fprintf(h, "\n%s", k)
		for _, v := range st.Buffers[k] {
			h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)))
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
