package commhook

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"sync"

	"github.com/goddp/ddp/pg"
)

// HierarchicalOptions say which ranks share a host. With neither field
// set, a rank's host is its os.Hostname().
type HierarchicalOptions struct {
	// Host is this rank's host label: ranks that pass the same label
	// share a host. Empty means os.Hostname(). Use it to simulate several
	// hosts on one machine, or where hostnames do not tell hosts apart.
	Host string
	// RanksPerHost, if positive, puts ranks [h*k, (h+1)*k) on host h, the
	// layout launchers give (torchrun, horovodrun); Host is then ignored.
	// The last host may have fewer ranks.
	RanksPerHost int
}

// Hierarchical is Horovod's hierarchical allreduce
// (HOROVOD_HIERARCHICAL_ALLREDUCE) as a comm hook: the ranks of each
// host reduce the bucket into their host's leader (its lowest rank), the
// leaders allreduce it between hosts, and each leader broadcasts the
// result to its host. Only the leaders send anything between hosts, once
// per bucket, so a host sends its share of one allreduce instead of one
// per rank. The result is the average over every rank, as Allreduce's:
// the bucket is divided by the world size first, then summed. Every rank
// ends with the same bits (the broadcast copies the leader's); they may
// differ from Allreduce's in the last place, since the sum is taken in
// another order.
//
// A failure in any step aborts both subgroups, so that the other ranks'
// steps fail at once instead of at the group timeout; the hook then fails
// every later bucket.
//
// The subgroups (one per host, one of the leaders) are made with
// pg.Splitter on the group the hook is first run with, by the first
// bucket's communication, or up front by Setup. One Hierarchical serves
// one rank of one group; Close releases its subgroups.
type Hierarchical struct {
	opts HierarchicalOptions
	seq  sequence

	mu    sync.Mutex // guards topo
	topo  *hostTopology
	close bool
}

// hostTopology is a rank's place in the host layout and its subgroups.
type hostTopology struct {
	rank, size int
	hosts      int             // number of hosts
	local      pg.ProcessGroup // this host's ranks, leader first
	rooted     pg.Rooted       // local's Reduce (pg.As); nil if local has one rank
	cross      pg.ProcessGroup // the leaders, one per host; nil on other ranks
	layout     []int           // host index of each rank
}

// NewHierarchical returns a hierarchical allreduce hook for the host
// layout o describes. It communicates nothing until Setup or its first
// Run.
func NewHierarchical(o HierarchicalOptions) (*Hierarchical, error) {
	if o.RanksPerHost < 0 {
		return nil, fmt.Errorf("commhook: RanksPerHost %d is negative; use 0 to group ranks by host label", o.RanksPerHost)
	}
	if o.RanksPerHost == 0 && o.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf(
				"commhook: hierarchical: no host label and os.Hostname failed (set HierarchicalOptions.Host): %w", err)
		}
		o.Host = h
	}
	return &Hierarchical{opts: o}, nil
}

// Name is "hierarchical".
func (*Hierarchical) Name() string { return "hierarchical" }

// Setup makes the subgroups on g now, instead of in the first bucket's
// communication. It is a collective of g: every rank calls it, in the
// same order as its other collectives. Calling it again does nothing.
func (h *Hierarchical) Setup(ctx context.Context, g pg.ProcessGroup) error {
	_, err := h.topology(ctx, g)
	return err
}

// HostLayout returns the host index of every rank of the group, hosts
// numbered in order of their lowest rank, once the subgroups are made
// (nil before).
func (h *Hierarchical) HostLayout() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.topo == nil {
		return nil
	}
	return append([]int(nil), h.topo.layout...)
}

// Close closes the subgroups. The hook cannot be run afterwards.
func (h *Hierarchical) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.close = true
	if h.topo == nil {
		return nil
	}
	var errs []error
	for _, g := range []pg.ProcessGroup{h.topo.local, h.topo.cross} {
		if g != nil {
			errs = append(errs, g.Close())
		}
	}
	return errors.Join(errs...)
}

// topology returns the layout and subgroups, making them on g the first
// time.
func (h *Hierarchical) topology(ctx context.Context, g pg.ProcessGroup) (*hostTopology, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.close {
		return nil, errors.New("commhook: hierarchical hook used after Close")
	}
	if t := h.topo; t != nil {
		if g.Rank() != t.rank || g.Size() != t.size {
			return nil, fmt.Errorf(
				"commhook: hierarchical hook set up for rank %d of %d, run as rank %d of %d: use one hook per rank and group",
				t.rank, t.size, g.Rank(), g.Size())
		}
		return t, nil
	}
	t, err := newHostTopology(ctx, g, h.opts)
	if err != nil {
		return nil, err
	}
	h.topo = t
	return t, nil
}

// newHostTopology learns every rank's host (hostLayout) and splits g into
// one group per host and one of the host leaders.
func newHostTopology(ctx context.Context, g pg.ProcessGroup, o HierarchicalOptions) (*hostTopology, error) {
	var sp pg.Splitter
	if !pg.As(g, &sp) {
		return nil, fmt.Errorf(
			"commhook: hierarchical allreduce needs subgroups, and a %s group cannot split (no pg.Splitter)", pg.BackendName(g))
	}
	rank, size := g.Rank(), g.Size()
	layout, hosts, err := hostLayout(ctx, g, o)
	if err != nil {
		return nil, fmt.Errorf("commhook: hierarchical: %w", err)
	}
	host := layout[rank]
	leader := true
	for r := range rank {
		if layout[r] == host {
			leader = false
			break
		}
	}
	local, err := sp.Split(ctx, host, rank)
	if err != nil {
		return nil, fmt.Errorf("commhook: hierarchical: making host %d's group: %w", host, err)
	}
	color := pg.NoColor
	if leader {
		color = 0
	}
	cross, err := sp.Split(ctx, color, rank)
	if err != nil {
		local.Close()
		return nil, fmt.Errorf("commhook: hierarchical: making the group of host leaders: %w", err)
	}
	var rooted pg.Rooted
	if local.Size() > 1 && !pg.As(local, &rooted) {
		local.Close()
		if cross != nil {
			cross.Close()
		}
		return nil, fmt.Errorf("commhook: hierarchical: a %s subgroup has no Reduce (pg.Rooted)", pg.BackendName(local))
	}
	return &hostTopology{rank: rank, size: size, hosts: hosts, local: local, rooted: rooted, cross: cross,
		layout: layout}, nil
}

// hostLayout learns every rank's host with one allgather of a host key:
// rank/RanksPerHost, or a hash of the Host label. It returns each rank's
// host index, hosts numbered in order of their lowest rank, and the number
// of hosts. It is collective over g.
func hostLayout(ctx context.Context, g pg.ProcessGroup, o HierarchicalOptions) (layout []int, hosts int, err error) {
	key := int64(0)
	if o.RanksPerHost > 0 {
		key = int64(g.Rank() / o.RanksPerHost)
	} else {
		f := fnv.New64a()
		f.Write([]byte(o.Host))
		key = int64(f.Sum64() >> 1) // non-negative, so never a RanksPerHost index's twin by sign
	}
	keys := make([]int64, g.Size())
	if err := g.AllGather(ctx, pg.Int64s(keys), pg.Int64s([]int64{key})).Wait(ctx); err != nil {
		return nil, 0, fmt.Errorf("exchanging host keys: %w", err)
	}
	layout = make([]int, g.Size())
	index := map[int64]int{}
	for r, k := range keys {
		if _, ok := index[k]; !ok {
			index[k] = len(index)
		}
		layout[r] = index[k]
	}
	return layout, len(index), nil
}

// Run divides b's buffer by the world size and starts the three steps
// on a goroutine, in bucket order (see Note [issue order across
// buckets]): reduce into the host leader, allreduce between leaders,
// broadcast from the leader.
func (h *Hierarchical) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	prev, mine := h.seq.take()
	if err := Divide(b.Buffer, g.Size()); err != nil {
		mine.pass(err)
		return pg.Completed(err)
	}
	f := pg.NewFuture()
	go func() { f.Complete(h.chain(ctx, g, b.Buffer, prev, mine)) }()
	return f
}

func (h *Hierarchical) chain(ctx context.Context, g pg.ProcessGroup, buf pg.Tensor, prev, mine *turn) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("commhook: hierarchical panicked: %v\n%s", p, debug.Stack())
		}
		mine.pass(err) // no-op once passed on success
	}()
	if err := prev.wait(ctx); err != nil {
		return err
	}
	t, err := h.topology(ctx, g)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil { // the ranks are out of step: fail the subgroups' peers now, not at their timeout
			t.abort(err)
		}
	}()
	if t.local.Size() > 1 {
		if err := t.rooted.Reduce(ctx, buf, 0, pg.Op(pg.Sum)).Wait(ctx); err != nil {
			return fmt.Errorf("commhook: hierarchical: reduce within host %d: %w", t.layout[t.rank], err)
		}
	}
	if t.cross != nil && t.cross.Size() > 1 {
		if err := t.cross.AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx); err != nil {
			return fmt.Errorf("commhook: hierarchical: allreduce between host leaders: %w", err)
		}
	}
	if t.local.Size() == 1 {
		return nil
	}
	w := t.local.Broadcast(ctx, buf, 0)
	mine.pass(nil)
	if err := w.Wait(ctx); err != nil {
		return fmt.Errorf("commhook: hierarchical: broadcast within host %d: %w", t.layout[t.rank], err)
	}
	return nil
}

// abort aborts the subgroups with cause.
func (t *hostTopology) abort(cause error) {
	t.local.Abort(cause)
	if t.cross != nil {
		t.cross.Abort(cause)
	}
}
