package tcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Tags of the monitored barrier's frames.
const (
	tagArrived uint32 = iota // rank j -> 0: j is here
	tagPresent               // 0 -> every rank: 0 is here and counting
	tagResult                // 0 -> every arrived rank: the ranks that did not arrive
)

// monitoredBarrier is c10d's monitored_barrier: rank 0 collects an
// arrival from every other rank, allowing timeout in all, then tells each
// arrived rank who is missing. With waitAll false it stops at the first
// missing rank, as c10d's wait_all_ranks=False. Every arrived rank then
// fails with the same *pg.MissingRanksError; a rank that never hears
// from rank 0 names rank 0.
func (g *Group) monitoredBarrier(r *run, timeout time.Duration, waitAll bool) error {
	if g.size == 1 {
		return nil
	}
	if g.rank == 0 {
		return g.monitorArrivals(r, timeout, waitAll)
	}
	return g.reportArrival(r, timeout)
}

func (g *Group) monitorArrivals(r *run, timeout time.Duration, waitAll bool) error {
	for j := 1; j < g.size; j++ {
		// A peer that is gone is simply missing; ignore the error here.
		_ = r.send(g.links[j], tagPresent, nil)
	}
	deadline := time.Now().Add(timeout)
	var missing []int
	for j := 1; j < g.size; j++ {
		r.setDeadline(deadline)
		b, err := r.recv(g.links[j], tagArrived, 0)
		switch {
		case err == nil:
			r.release(b)
		case r.missed(err):
			missing = append(missing, j)
		default:
			return err
		}
		if len(missing) > 0 && !waitAll {
			break
		}
	}
	result := wire.AppendUint64(nil, uint64(len(missing)))
	for _, m := range missing {
		result = wire.AppendUint64(result, uint64(m))
	}
	r.setDeadline(time.Now().Add(timeout))
	for j := 1; j < g.size; j++ {
		if !contains(missing, j) {
			if err := r.send(g.links[j], tagResult, result); err != nil && !r.missed(err) {
				return err
			}
		}
	}
	// Once the result is out, an arrived rank may fail the group (it
	// has its answer) before the last frame is confirmed written; the
	// missing ranks are still the answer.
	if err := r.flush(); err != nil && len(missing) == 0 {
		return err
	}
	return g.missingErr(missing, timeout)
}

func (g *Group) reportArrival(r *run, timeout time.Duration) error {
	zero := g.links[0]
	if err := r.send(zero, tagArrived, nil); err != nil {
		return g.missedZero(r, err, timeout)
	}
	r.setDeadline(time.Now().Add(timeout))
	b, err := r.recv(zero, tagPresent, 0)
	if err != nil {
		return g.missedZero(r, err, timeout)
	}
	r.release(b)
	// Rank 0 counts for at most timeout from when it said it was present.
	r.setDeadline(time.Now().Add(timeout + max(time.Second, timeout/4)))
	b, err = r.recv(zero, tagResult, -1)
	if err != nil {
		return g.missedZero(r, err, timeout)
	}
	missing, err := decodeMissing(b, g.size)
	r.release(b)
	if err != nil {
		return r.errf(0, pg.ErrComm, err)
	}
	if err := r.flush(); err != nil && len(missing) == 0 {
		return err
	}
	return g.missingErr(missing, timeout)
}

// missedZero turns a failed wait on rank 0 into rank 0 being missing.
func (g *Group) missedZero(r *run, err error, timeout time.Duration) error {
	if r.missed(err) {
		return g.missingErr([]int{0}, timeout)
	}
	return err
}

// missed reports whether err means the peer waited on did not make it
// (timed out, or its link failed), rather than this rank or group failing.
func (r *run) missed(err error) bool {
	if r.g.failure.Load() != nil || r.ctx.Err() != nil {
		return false
	}
	var ce *pg.CollectiveError
	return errors.As(err, &ce) && ce.Peer != pg.NoPeer &&
		(ce.Kind == pg.ErrTimeout || ce.Kind == pg.ErrComm || ce.Kind == pg.ErrRemote)
}

func (g *Group) missingErr(missing []int, timeout time.Duration) error {
	if len(missing) == 0 {
		return nil
	}
	return &pg.MissingRanksError{Rank: g.rank, Missing: missing, Timeout: timeout.String()}
}

func decodeMissing(b []byte, size int) ([]int, error) {
	d := wire.NewDecoder(b)
	n := d.Uint64()
	if n >= uint64(size) {
		return nil, fmt.Errorf("monitored barrier result names %d missing ranks in a group of %d", n, size)
	}
	missing := make([]int, 0, n)
	for range n {
		m := d.Uint64()
		if m == 0 || m >= uint64(size) {
			return nil, fmt.Errorf("monitored barrier result names rank %d in a group of %d", m, size)
		}
		missing = append(missing, int(m))
	}
	return missing, d.Finish()
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
