//go:build mpi

package mpi

/*
#include "goddp_mpi.h"
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// NewGroup is c10d's new_group(ranks), through MPI_Comm_split: members
// take color 0 and their index in ranks as key, the others
// MPI_UNDEFINED. See Split for how it avoids blocking.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	me, err := backend.CheckNewGroup(ranks, g.rank, g.size)
	if err != nil {
		return nil, err
	}
	if me < 0 {
		return g.split(ctx, pg.NoColor, 0)
	}
	return g.split(ctx, 0, me)
}

// Split is ncclCommSplit through MPI_Comm_split. MPI_Comm_split blocks,
// so every rank first allgathers its color (a collective of this group,
// bounded by the timeout like any other); once that finishes, every rank
// is known to be at the split, which then returns at once.
func (g *Group) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if color < 0 && color != pg.NoColor {
		return nil, fmt.Errorf("%w: split color %d is negative; use pg.NoColor to stay out", pg.ErrInvalidArgument, color)
	}
	return g.split(ctx, color, key)
}

func (g *Group) split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if err := backend.CheckContext(ctx); err != nil {
		return nil, err
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*g.size)
	if err := g.AllGather(ctx, pg.Int64s(all), pg.Int64s(mine)).Wait(ctx); err != nil {
		return nil, err
	}
	// The subgroup's size and this rank's place in it, as MPI orders them.
	size, rank := 0, 0
	for r := 0; r < g.size; r++ {
		c, k := int(all[2*r]), int(all[2*r+1])
		if c != color || color == pg.NoColor {
			continue
		}
		size++
		if k < key || (k == key && r < g.rank) {
			rank++
		}
	}
	if !g.e.ref() {
		return nil, fmt.Errorf("%w: MPI has been finalised in this process", pg.ErrClosed)
	}
	sub := newGroup(g.e, g.opts, rank, size)
	var rc C.int
	var err error
	g.mu.Lock()
	if g.state != nil {
		err = g.state
	}
	g.mu.Unlock()
	if err == nil {
		g.e.call(func() {
			c := C.int(color)
			if color == pg.NoColor {
				c = C.goddp_undefined()
			}
			rc = C.goddp_split(g.comm, c, C.int(key), &sub.comm)
			if rc == C.MPI_SUCCESS && sub.comm != C.goddp_comm_null() {
				rc = C.goddp_dup(sub.comm, &sub.monitor)
				sub.tagUB = int(C.goddp_tag_ub(sub.comm))
				if r := int(C.goddp_rank(sub.comm)); r != rank {
					err = fmt.Errorf("MPI_Comm_split gave rank %d, expected %d", r, rank)
				}
			}
		})
	}
	if err == nil && rc != C.MPI_SUCCESS {
		err = fmt.Errorf("%w: MPI_Comm_split: %w", pg.ErrComm, mpiError(rc))
	}
	if err != nil || color == pg.NoColor {
		sub.monitor = C.goddp_comm_null()
		sub.Close()
		if err != nil {
			return nil, &pg.CollectiveError{Op: "split", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrComm, Err: err}
		}
		return nil, nil
	}
	return sub, nil
}
