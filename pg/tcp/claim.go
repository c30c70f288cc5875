package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// Note [duplicate ranks]
//
// Two processes started with the same RANK (RANK 0,1,1 of WORLD_SIZE=3)
// would overwrite each other's address in the store, and every process
// would then time out with messages about ranks that never connected. So
// each rank claims its number in the store before it publishes its address:
// CompareSet of "tcp/rank/<r>" from empty to a description of the
// process (host, pid, listen address). The second claimer gets the
// first's description back: it publishes the failure under "tcp/failed"
// and fails at once with a *DuplicateRankError naming the rank and both
// processes. Every rank watches "tcp/failed" (one more parked Get, so one
// more store connection, per rank for the rendezvous) and fails with the
// same error as soon as it is set, instead of timing out. Rank 0, which
// hosts the TCPStore in c10d's convention, waits up to failureLinger
// before returning, until every process that claimed a rank has counted
// itself in "tcp/failed/seen", so that closing its store does not turn
// the others' errors into lost connections. A process that reaches the
// store after rank 0 has gone cannot learn why.

// ErrDuplicateRank is the sentinel of a *DuplicateRankError.
var ErrDuplicateRank = errors.New("two processes claim the same rank")

// DuplicateRankError reports that two processes claimed one rank at
// rendezvous. Every process of the job that reached the rendezvous fails
// with it. It matches ErrDuplicateRank with errors.Is; New wraps it in a
// *pg.CollectiveError of kind pg.ErrInvalidArgument.
type DuplicateRankError struct {
	Rank int
	// First and Second describe the processes that claimed Rank, in
	// order: host, process id and listen address.
	First, Second string
}

func (e *DuplicateRankError) Error() string {
	return fmt.Sprintf("rank %d is claimed by two processes: %s, then %s; every process of a job needs a rank of its "+
		"own (check RANK, or the launcher's node rank and local rank)",
		e.Rank, e.First, e.Second)
}

// Unwrap makes errors.Is(err, ErrDuplicateRank) true.
func (e *DuplicateRankError) Unwrap() error { return ErrDuplicateRank }

const (
	failedKey     = "tcp/failed"
	failedSeenKey = "tcp/failed/seen"
	claimsKey     = "tcp/claims"
	// failureLinger bounds rank 0's wait for the others to see a failure.
	failureLinger = 2 * time.Second
)

func claimKey(rank int) string { return "tcp/rank/" + strconv.Itoa(rank) }

// whoAmI describes this process for a claim: host, pid and the address
// its listener advertises.
func whoAmI(adv string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "an unnamed host"
	}
	return fmt.Sprintf("%s (pid %d, listening on %s)", host, os.Getpid(), adv)
}

// claimRank claims o.Rank for the process who. If another process holds
// it, it publishes the failure and returns it.
func claimRank(ctx context.Context, st store.Store, o Options, who string) error {
	if _, err := st.Add(ctx, claimsKey, 1); err != nil {
		return connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("claiming rank %d: %w", o.Rank, err))
	}
	held, err := st.CompareSet(ctx, claimKey(o.Rank), nil, []byte(who))
	if err != nil {
		return connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("claiming rank %d: %w", o.Rank, err))
	}
	if string(held) == who {
		return nil
	}
	dup := &DuplicateRankError{Rank: o.Rank, First: string(held), Second: who}
	rec := wire.AppendString(wire.AppendString(wire.AppendUint64(nil, uint64(o.Rank)), dup.First), dup.Second)
	if err := st.Set(ctx, failedKey, rec); err == nil {
		st.Add(ctx, failedSeenKey, 1)
	}
	return dupErr(o, dup)
}

// dupErr is New's error for dup.
func dupErr(o Options, dup *DuplicateRankError) error {
	peer := dup.Rank
	if peer == o.Rank {
		peer = pg.NoPeer
	}
	return connectErr(o, peer, pg.ErrInvalidArgument, dup)
}

func decodeFailure(rec []byte) (*DuplicateRankError, error) {
	d := wire.NewDecoder(rec)
	rank, first, second := d.Uint64(), d.String(), d.String()
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return &DuplicateRankError{Rank: int(min(rank, uint64(1<<31))), First: first, Second: second}, nil
}

// failureWatch parks a Get on failedKey for the rendezvous and cancels
// the rendezvous with the failure when it is set.
type failureWatch struct {
	st     store.Store
	o      Options
	cancel context.CancelCauseFunc
	stopW  context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	dup *DuplicateRankError
}

// watchFailure returns ctx, to be cancelled when a failure is published,
// and the watch.
func watchFailure(ctx context.Context, st store.Store, o Options) (context.Context, *failureWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	wctx, stop := context.WithCancel(ctx)
	w := &failureWatch{st: st, o: o, cancel: cancel, stopW: stop}
	w.wg.Go(func() {
		rec, err := st.Get(wctx, failedKey)
		if err != nil {
			return // the rendezvous ended, or the store failed, which it sees too
		}
		dup, err := decodeFailure(rec)
		if err != nil {
			dup = &DuplicateRankError{Rank: -1, First: "?", Second: fmt.Sprintf("(unreadable failure record: %v)", err)}
		}
		w.mu.Lock()
		w.dup = dup
		w.mu.Unlock()
		cancel(dup)
	})
	return ctx, w
}

// stop ends the watch. If a failure was published, it counts this
// process as having seen it, and returns it as New's error; rank 0 then
// waits for the others to see it too (Note [duplicate ranks]).
func (w *failureWatch) stop(ctx context.Context) error {
	w.stopW()
	w.wg.Wait()
	w.cancel(nil)
	w.mu.Lock()
	dup := w.dup
	w.mu.Unlock()
	if dup == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureLinger)
	defer cancel()
	w.st.Add(ctx, failedSeenKey, 1)
	if w.o.Rank == 0 {
		awaitSeen(ctx, w.st)
	}
	return dupErr(w.o, dup)
}

// awaitSeen waits until every process that claimed a rank has seen the
// failure, or ctx ends.
func awaitSeen(ctx context.Context, st store.Store) {
	for {
		seen, err1 := st.Add(ctx, failedSeenKey, 0)
		claims, err2 := st.Add(ctx, claimsKey, 0)
		if err1 != nil || err2 != nil || seen >= claims {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
