package nccl

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
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
	if err := backend.CheckContext(ctx); err != nil {
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.opts.Timeout)
		defer cancel()
	}
	seq, child, failed, err := g.splitComm(ctx, color, key)
	if failed != nil {
		return nil, failed
	}
	if err != nil {
		err = &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: kindOf(err), Err: err}
		g.fail(kindOf(err), err, nil)
		return nil, err
	}
	if child == nil {
		return nil, nil
	}
	rank, size, err := child.RankSize()
	if err != nil {
		_ = child.Abort()
		return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrComm, Err: err}
	}
	opts := g.opts
	opts.Rank, opts.Size = rank, size
	opts.StoreKey = fmt.Sprintf("%s/split%d/color%d", g.storeKey, seq, color)
	return newGroup(child, opts, g.st), nil
}

// splitComm numbers the split as a collective of the parent and, in
// issue order, splits the communicator. It returns the group's failure
// if the group has failed, else the split's sequence number, the child
// communicator (nil for pg.NoColor) and the error of splitting.
func (g *Group) splitComm(ctx context.Context, color, key int) (seq uint64, child binding.Backend, failed, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.failedLocked(); err != nil {
		return 0, nil, err, nil
	}
	g.seq++ // a collective of the parent, numbered like one
	child, err = g.be.Split(ctx, color, key)
	return g.seq, child, nil, err
}

// NewGroup is c10d's new_group(ranks), a Split in which the listed ranks
// take color 0 and their index as key.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	me, err := backend.CheckNewGroup(ranks, g.rank, g.size)
	if err != nil {
		return nil, &pg.CollectiveError{Op: "new_group", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err}
	}
	if me < 0 {
		return g.Split(ctx, pg.NoColor, 0)
	}
	return g.Split(ctx, 0, me)
}
