package tcp

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// Note [subgroups]: NewGroup and Split are collectives of the parent: each
// runs one allgather on it (of a fingerprint of the ranks, or of the
// (color, key) pairs), which puts it in the parent's order and tells every
// rank the same thing. The members then build a new Group, a mesh of
// their own authenticated connections, rendezvousing through the parent's
// store under the prefix "sub/<seq>/<color>", where seq is the
// allgather's sequence number: unique in the parent, the same on every
// rank, with no extra round. A subgroup's store is a PrefixStore over its
// parent's, so the prefixes of subgroups of subgroups nest. It keeps the
// parent's Options (timeout, secret, tuning) but listens on a fresh port
// of the same host. Being its own Group, it fails alone: a dead member
// fails it, and the parent only if the parent needs that rank too.

// NewGroup is c10d's new_group(ranks): the members get a new Group whose
// rank i is the parent's ranks[i]; other ranks get nil and no error.
// Every rank of the parent must call it, with the same ranks, in the same
// order as its other collectives. ctx bounds the subgroup's rendezvous;
// without a deadline, the group timeout does. Close the subgroup when
// done with it: closing the parent does not.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	me, err := backend.CheckNewGroup(ranks, g.rank, g.size)
	if err == nil {
		err = backend.CheckContext(ctx)
	}
	if err != nil {
		return nil, &pg.CollectiveError{Op: "new_group", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	h := fnv.New64a()
	for _, r := range ranks {
		h.Write(wire.AppendUint64(nil, uint64(r)))
	}
	all, seq, err := g.exchange(ctx, "new_group", int64(h.Sum64()), 0)
	if err != nil {
		return nil, err
	}
	for j := range g.size {
		if all[2*j] != all[2*g.rank] {
			return nil, &pg.CollectiveError{Op: "new_group", Rank: g.rank, Peer: j, Kind: pg.ErrMismatch,
				Err: fmt.Errorf("rank %d passed other ranks to NewGroup than this rank's %v: every rank must pass the same", j,
					ranks)}
		}
	}
	if me < 0 {
		return nil, nil
	}
	return g.subgroup(ctx, "sub/"+strconv.FormatUint(seq, 10)+"/new", ranks, me)
}

// Split is ncclCommSplit: ranks that pass the same color form a group,
// ordered by key and then by parent rank. A rank that passes pg.NoColor
// gets nil and no error. Every rank of the parent must call it, in the
// same order as its other collectives.
func (g *Group) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if color < 0 && color != pg.NoColor {
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: fmt.Errorf("%w: split color %d is negative; pass pg.NoColor to stay out", pg.ErrInvalidArgument, color)}
	}
	if err := backend.CheckContext(ctx); err != nil {
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	all, seq, err := g.exchange(ctx, "split", int64(color), int64(key))
	if err != nil {
		return nil, err
	}
	if color == pg.NoColor {
		return nil, nil
	}
	var members []int
	for j := range g.size {
		if all[2*j] == int64(color) {
			members = append(members, j)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(all[2*a+1], all[2*b+1]) })
	me := slices.Index(members, g.rank)
	return g.subgroup(ctx, "sub/"+strconv.FormatUint(seq, 10)+"/"+strconv.Itoa(color), members, me)
}

// exchange allgathers (a, b) over the parent and returns every rank's
// pair and the allgather's sequence number.
func (g *Group) exchange(ctx context.Context, what string, a, b int64) ([]int64, uint64, error) {
	in := []int64{a, b}
	all := make([]int64, 2*g.size)
	w := g.AllGather(ctx, pg.Int64s(all), pg.Int64s(in))
	if err := w.Wait(ctx); err != nil {
		return nil, 0, fmt.Errorf("tcp: %s: agreeing on the subgroups: %w", what, err)
	}
	return all, w.Seq(), nil
}

// subgroup joins the subgroup of parent ranks members in which this rank
// is rank me.
func (g *Group) subgroup(ctx context.Context, prefix string, members []int, me int) (pg.ProcessGroup, error) {
	o := g.opts
	o.Rank, o.Size = me, len(members)
	host, _, err := net.SplitHostPort(o.ListenAddr)
	if err != nil {
		return nil, &pg.CollectiveError{Op: "connect", Rank: me, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	o.ListenAddr = net.JoinHostPort(host, "0")
	if o.AdvertiseAddr != "" {
		if h, _, err := net.SplitHostPort(o.AdvertiseAddr); err == nil {
			o.advertiseHost = h
		}
		o.AdvertiseAddr = ""
	}
	o.Logger = g.opts.Logger.With(zap.String("subgroup", prefix), zap.Int("parent_rank", g.rank))
	sub, err := newGroup(ctx, store.NewPrefixStore(prefix, g.st), o, members)
	if err != nil {
		return nil, err // not a nil *Group in a non-nil interface
	}
	return sub, nil
}
