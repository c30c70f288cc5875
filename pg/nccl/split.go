package nccl

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// Split makes subgroups with ncclCommSplit (2.18): every rank of the
// parent calls it, in the same order as its collectives. The subgroup has
// its own stream, watchdog and sequence numbers, and the parent's
// timeout. Ranks passing pg.NoColor get nil.
func (g *Group) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if color < 0 && color != pg.NoColor {
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: fmt.Errorf("color %d is negative and not pg.NoColor", color)}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.opts.Timeout)
		defer cancel()
	}
	g.mu.Lock()
	if err := g.failedLocked(); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	g.seq++ // a collective of the parent, numbered like one
	seq := g.seq
	child, err := g.be.split(ctx, color, key)
	g.mu.Unlock()
	if err != nil {
		err = &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: kindOf(err), Err: err}
		g.fail(kindOf(err), err, nil)
		return nil, err
	}
	if child == nil {
		return nil, nil
	}
	rank, size, err := child.rankSize()
	if err != nil {
		_ = child.abort()
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrComm, Err: err}
	}
	opts := g.opts
	opts.Rank, opts.Size = rank, size
	opts.StoreKey = fmt.Sprintf("%s/split%d/color%d", g.storeKey, seq, color)
	return newGroup(child, opts, g.st), nil
}

// NewGroup is c10d's new_group(ranks), a Split in which the listed ranks
// take color 0 and their index as key.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	me, err := pg.CheckNewGroup(ranks, g.rank, g.size)
	if err != nil {
		return nil, &pg.CollectiveError{Op: "new_group", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	if me < 0 {
		return g.Split(ctx, pg.NoColor, 0)
	}
	return g.Split(ctx, 0, me)
}
