package ft

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// Note [the step as a transaction], after torchft's Manager
// (torchft/manager.py: start_quorum, allreduce, should_commit) with one
// vote more:
//
//  1. Start asks the lighthouse for the step's quorum with this replica's
//     committed step and its consecutive commit failures. When the quorum
//     id differs from the last one, or the last group failed a
//     collective, the group across the members is rebuilt (Connect, on
//     the primary's store, keys under "ft/<quorum id>/<formed at>/": a
//     restarted lighthouse counts ids from 1 again). A member whose
//     commit failures are above zero makes the lighthouse raise the id, so
//     a failure anywhere rebuilds everyone's group.
//  2. The participants are the members at the quorum's max step that
//     hold its commit chain (Note [the commit chain], results.go). A
//     member behind them heals: Start begins fetching a peer's Snapshot in the
//     background (recovery.go), and for this step the member reads no data
//     and contributes zeros.
//  3. AllReduce sums over the group and divides by the participants. Its
//     failure (a dead peer, a timeout) is kept for Commit; it does not end
//     the job.
//  4. Commit restores a healing member's state, then every member votes
//     with a MIN allreduce of 1 (no failure this step) or 0. Only a vote
//     that completes with 1 commits: the step counter advances, and the
//     caller applies the update (a healed member with the same average
//     as the others, on the state it restored). Anything else discards the
//     step: the caller drops the gradients and takes the same data again.
//
// A vote either completes on a member, and then every member voted 1 and
// every contribution is in the average, or fails there. It can complete on
// some members and fail on others only when a member dies during the vote
// itself, or freezes in it and thaws to find the others' votes waiting;
// those that failed are a step behind at the next quorum and heal from
// those that committed, and if the others have redone the step by then,
// the commit chain tells the two histories apart. So no member applies an
// average that lacks a participant's contribution, and the members that go
// on hold one state.

// Start begins the next step: the quorum, the group and any recovery
// (Note [the step as a transaction]). Its error is the lighthouse's
// (none answered within the timeout); a group that cannot be formed is a
// failed step, which Commit reports.
func (m *Manager) Start(ctx context.Context) (StepInfo, error) {
	if m.inStep {
		return StepInfo{}, errors.New("ft: Start called twice without Commit")
	}
	m.errMu.Lock()
	m.stepEr = nil
	m.errMu.Unlock()
	qctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	q, err := m.o.Lighthouse.Quorum(qctx, Member{ReplicaID: m.o.ReplicaID, Address: m.advertise(m.rec.Addr()),
		StoreAddress: m.advertise(m.store.Addr()), Step: m.step, WorldSize: 1, CommitFailures: m.commitFailures,
		CommitChain: m.chain})
	if err != nil {
		return StepInfo{}, fmt.Errorf("ft: replica %s at step %d: no quorum: %w", m.o.ReplicaID, m.step, err)
	}
	r, err := q.Results(m.o.ReplicaID, 0, !m.o.NoInitSync)
	if err != nil {
		return StepInfo{}, err
	}
	m.inStep = true
	info := m.stepInfo(q, r)
	if key := membersKey(q.Members); r.QuorumID != m.quorumID || m.broken || m.group == nil || key != m.groupKey {
		info.Reconfigured = true
		m.groupKey = key
		m.reconfigure(ctx, r, q.Created)
	}
	if len(r.RecoverDstRanks) > 0 {
		info.Serving = len(r.RecoverDstRanks)
		m.serve(r)
	}
	if r.Heal {
		m.startHeal(ctx, r)
	}
	m.info = info
	m.log.Debug("step started", zap.Int64("step", m.step), zap.Int64("quorum_id", r.QuorumID),
		zap.Strings("participants", info.Participants), zap.Bool("healing", info.Healing))
	return info, nil
}

// membersKey names a quorum's members and their addresses. The lighthouse
// keeps a quorum's id while its replica ids stay the same (torchft's
// quorum_changed); torchft's ids carry a uuid per process, ours survive a
// restart, so a replica restarted between two quorums of one id shows up
// only in its addresses (fresh ports in each life). A member whose key
// changed rebuilds its group with the new life instead of keeping a
// connection to the dead one.
func membersKey(ms []Member) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00", m.ReplicaID, m.Address, m.StoreAddress)
	}
	return b.String()
}

// stepInfo is the StepInfo of quorum q for this replica, and the group
// ranks of its participants.
func (m *Manager) stepInfo(q Quorum, r Results) StepInfo {
	ms := slices.Clone(q.Members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
	info := StepInfo{Step: r.MaxStep, QuorumID: r.QuorumID, Rank: -1, Healing: r.Heal, Members: len(ms)}
	m.participantIdx = m.participantIdx[:0]
	_, up := current(ms, r.MaxStep)
	primary := slices.Index(up, true) // Results' primary for group rank 0 (init_sync at step 0: the others heal)
	for i, mem := range ms {
		if !up[i] || (!m.o.NoInitSync && r.MaxStep == 0 && i != primary) {
			continue // heals this step
		}
		if i == r.ReplicaRank {
			info.Rank = len(info.Participants)
		}
		info.Participants = append(info.Participants, mem.ReplicaID)
		m.participantIdx = append(m.participantIdx, i)
	}
	if r.Heal {
		info.Rank = -1
	}
	return info
}

// reconfigure replaces the group with one for quorum r; a failure is the
// step's.
func (m *Manager) reconfigure(ctx context.Context, r Results, created time.Time) {
	if m.group != nil {
		_ = m.group.Close() // a broken group's error is old news
		m.group = nil
	}
	m.broken = false
	m.quorumID = r.QuorumID
	m.stats.QuorumChanges++
	m.met.quorumChanged(r)
	cctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	start := time.Now()
	g, err := m.o.Connect(cctx, GroupConfig{QuorumID: r.QuorumID, Rank: r.ReplicaRank, Size: r.ReplicaWorldSize,
		StoreAddress: r.StoreAddress, Prefix: fmt.Sprintf("ft/%d/%d/", r.QuorumID, created.UnixNano())})
	if err != nil {
		m.broken = true
		m.fail(fmt.Errorf("ft: joining quorum %d's group of %d: %w", r.QuorumID, r.ReplicaWorldSize, err))
		return
	}
	m.group = g
	m.log.Info("quorum changed", zap.Int64("quorum_id", r.QuorumID), zap.Int("rank", r.ReplicaRank),
		zap.Int("members", r.ReplicaWorldSize), zap.Int64("max_step", r.MaxStep), zap.Duration("connect", time.Since(start)))
}

// AllReduce averages t over the step's participants, in place: a healing
// replica contributes zeros. It fails when the group does (the failure is
// also kept for Commit), and then t's values are not to be used.
func (m *Manager) AllReduce(ctx context.Context, t pg.Tensor) error {
	if !m.inStep {
		return errors.New("ft: AllReduce outside a step (call Start first)")
	}
	if m.group == nil || m.broken { // a failure recorded by Fail still takes part: the others wait for it
		err := m.failure()
		if err == nil {
			err = errors.New("ft: no process group for this step")
		}
		m.fail(err)
		return err
	}
	if m.info.Healing {
		clear(t.Data)
	}
	var err error
	if m.o.OrderedSum {
		err = m.orderedSum(ctx, t)
	} else {
		err = m.group.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx)
	}
	if err == nil {
		err = commhook.Divide(t, len(m.info.Participants))
	}
	if err != nil {
		m.broken = true
		err = fmt.Errorf("ft: step %d, quorum %d: averaging over %d participants: %w", m.step, m.quorumID,
			len(m.info.Participants), err)
		m.fail(err)
	}
	return err
}

// orderedSum sums t over the participants in their order: gathered, then
// added one after another from the first (OrderedSum).
func (m *Manager) orderedSum(ctx context.Context, t pg.Tensor) error {
	n := t.Len()
	all := pg.NewTensor(t.Dtype, n*m.group.Size())
	if err := m.group.AllGather(ctx, all, t).Wait(ctx); err != nil {
		return err
	}
	clear(t.Data)
	for _, i := range m.participantIdx {
		if err := addInto(t, all.Slice(i*n, (i+1)*n)); err != nil {
			return err
		}
	}
	return nil
}

// addInto adds src into dst, elementwise.
func addInto(dst, src pg.Tensor) error {
	switch dst.Dtype {
	case pg.Float32:
		x, y := pg.View[float32](dst), pg.View[float32](src)
		for i := range x {
			x[i] += y[i]
		}
	case pg.Float64:
		x, y := pg.View[float64](dst), pg.View[float64](src)
		for i := range x {
			x[i] += y[i]
		}
	default:
		return fmt.Errorf("ft: OrderedSum of %v values; it sums float32 and float64", dst.Dtype)
	}
	return nil
}

// Fail records a failure of this replica's step that the Manager did not
// see (a non-finite loss, a bad batch): Commit then votes to discard it.
func (m *Manager) Fail(err error) { m.fail(err) }

// Commit ends the step: a healing replica restores its peer's state, and
// every member votes (Note [the step as a transaction]). When the outcome
// is committed the caller applies the step's update; otherwise it drops
// it. Its error is ctx's alone: every failure of the step is a discarded
// step, in Outcome.Err.
func (m *Manager) Commit(ctx context.Context) (Outcome, error) {
	if !m.inStep {
		return Outcome{}, errors.New("ft: Commit without Start")
	}
	m.inStep = false
	if m.heal != nil {
		m.finishHeal()
	}
	ok := m.vote(ctx)
	out := Outcome{Committed: ok, Info: m.info, Err: m.failure(), Parent: m.chain}
	if ok {
		m.chain = nextChain(m.chain, m.info)
		m.step++
		m.commitFailures = 0
		m.stats.Committed++
		m.stats.ParticipantsSum += int64(len(m.info.Participants))
	} else {
		m.commitFailures++
		m.stats.Discarded++
		if out.Err == nil {
			out.Err = errors.New("ft: another member voted to discard the step")
		}
		m.log.Warn("step discarded", zap.Int64("step", m.step), zap.Int64("quorum_id", m.quorumID),
			zap.Error(out.Err))
	}
	m.met.stepped(ok, len(m.info.Participants))
	out.Step, out.Chain = m.step, m.chain
	return out, ctx.Err()
}

// vote is the members' MIN over "this step had no failure".
func (m *Manager) vote(ctx context.Context) bool {
	if m.group == nil || m.broken {
		return false
	}
	ok := 1.0
	if m.failure() != nil {
		ok = 0
	}
	v := pg.Float64s([]float64{ok})
	vctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	if err := m.group.AllReduce(vctx, v, pg.Op(pg.Min)).Wait(vctx); err != nil {
		m.broken = true
		m.fail(fmt.Errorf("ft: step %d, quorum %d: the commit vote: %w", m.step, m.quorumID, err))
		return false
	}
	return pg.View[float64](v)[0] == 1 && m.failure() == nil
}

// nextChain extends chain by the committed step info (Note [the commit
// chain]).
func nextChain(chain string, info StepInfo) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d", chain, info.QuorumID, info.Step)
	for _, p := range info.Participants {
		fmt.Fprintf(h, "\x00%s", p)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
