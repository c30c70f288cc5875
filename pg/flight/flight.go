package flight

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
)

// DefaultEntries is the ring's size when Options.Entries is 0: torch's
// default for TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE), 2000.
const DefaultEntries = 2000

// Options configure a Recorder. The zero value records the last 2000
// operations of a group named "0" whose global ranks are 0..size-1.
type Options struct {
	// Entries is how many operations the ring keeps; 0 means
	// DefaultEntries, a negative number is refused.
	Entries int
	// Name and Desc are the group's name and description, torch's
	// process_group tuple; "0" and "default_pg" when empty, as torch
	// names its world group.
	Name, Desc string
	// GlobalRank is this process's rank in the job, which names its
	// dump file; Ranks maps the group's ranks to global ranks. Both
	// default to the group's own numbering (a world group).
	GlobalRank int
	Ranks      []int
	// Timeout is recorded in every entry as timeout_ms.
	Timeout time.Duration
	// OnFailure, if not nil, is called once, on the goroutine that
	// observed it, with the first error a Work recorded here returned
	// from Wait or Err (pg.ErrTimeout among them): the place for a
	// program to dump the recorder, as torch dumps on a timeout.
	OnFailure func(error)
}

// Recorder is a process group that records every operation issued
// through it in a bounded ring, for dumps in the JSON layout of
// PyTorch's flight recorder. See the package doc.
type Recorder struct {
	pg.ProcessGroup
	ring *ring // shared with subgroups: one dump per process, as torch's
	grp  *groupInfo
}

// groupInfo is what a Recorder knows of its group; its counters are
// guarded by the ring's mutex.
type groupInfo struct {
	id         int
	rank       int // this process's rank in the group
	name, desc string
	ranks      []int
	timeoutMS  int64
	collSeq    uint64
	p2pSeq     uint64
	splits     int // subgroups made, which names them alike on every rank
	onFailure  func(error)
	failedOnce sync.Once
}

// Wrap returns g wrapped in a Recorder. Closing the Recorder closes g.
func Wrap(g pg.ProcessGroup, o Options) (*Recorder, error) {
	if g == nil {
		return nil, fmt.Errorf("flight: Wrap of a nil group")
	}
	n := o.Entries
	if n < 0 {
		return nil, fmt.Errorf("flight: Options.Entries is %d; want 0 (the default, %d) or more", n, DefaultEntries)
	}
	var a Attacher
	attached := pg.As(g, &a)
	if n == 0 && attached {
		n = a.FlightEntries()
	}
	if n <= 0 {
		n = DefaultEntries
	}
	ranks := o.Ranks
	if ranks == nil {
		ranks = make([]int, g.Size())
		for i := range ranks {
			ranks[i] = i
		}
		if o.GlobalRank == 0 {
			o.GlobalRank = g.Rank()
		}
	}
	if len(ranks) != g.Size() {
		return nil, fmt.Errorf("flight: Options.Ranks has %d ranks for a group of %d", len(ranks), g.Size())
	}
	gi := &groupInfo{
		rank: g.Rank(), name: o.Name, desc: o.Desc, ranks: ranks,
		timeoutMS: o.Timeout.Milliseconds(), onFailure: o.OnFailure,
	}
	if gi.name == "" {
		gi.name = "0"
	}
	if gi.desc == "" {
		gi.desc = "default_pg"
	}
	r := &ring{entries: make([]entry, n), rank: o.GlobalRank}
	r.groups = append(r.groups, gi)
	rec := &Recorder{ProcessGroup: g, ring: r, grp: gi}
	if attached {
		a.AttachFlight(rec)
	}
	return rec, nil
}

// Attacher is a group that takes part in its recording: Wrap (and a
// recorded Split or NewGroup, for the subgroup) finds it behind any
// wrappers with pg.As, sizes the ring by FlightEntries when
// Options.Entries is 0 (0 or less: DefaultEntries), and calls
// AttachFlight with the new Recorder. pg/nccl's Group is one: its
// watchdog sees a timeout before any caller does, and logs and dumps the
// Recorder then, as torch's watchdog dumps its flight recorder. (Its
// event times reach the ring through its Works: pg.TimedWork.)
type Attacher interface {
	AttachFlight(*Recorder)
	FlightEntries() int
}

// Inner is the recorded group.
func (r *Recorder) Inner() pg.ProcessGroup { return r.ProcessGroup }

// Backend is the recorded group's backend name.
func (r *Recorder) Backend() string { return pg.BackendName(r.ProcessGroup) }

// call describes one operation for the ring.
type call struct {
	op      pg.OpType
	dtype   pg.Dtype
	in, out int   // element counts of single-tensor operations
	ins     []int // element counts of coalesced inputs and outputs
	outs    []int
	p2p     bool
	peer    int // the other rank of a Send or Recv, in the group's numbering
}

// issue records c, runs it, and returns its Work, watched for failure.
func (r *Recorder) issue(c call, run func() pg.Work) pg.Work {
	id := r.ring.schedule(r.grp, c)
	w := run()
	r.ring.attach(id, w)
	return &work{Work: w, r: r}
}

// AllReduce records t and forwards.
func (r *Recorder) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	n := tlen(t)
	return r.issue(call{op: pg.OpAllReduce, dtype: t.Dtype, in: n, out: n}, func() pg.Work {
		return r.ProcessGroup.AllReduce(ctx, t, op)
	})
}

// Broadcast records t and forwards.
func (r *Recorder) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	n := tlen(t)
	return r.issue(call{op: pg.OpBroadcast, dtype: t.Dtype, in: n, out: n}, func() pg.Work {
		return r.ProcessGroup.Broadcast(ctx, t, root)
	})
}

// AllGather records in and out and forwards.
func (r *Recorder) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	return r.issue(call{op: pg.OpAllGather, dtype: in.Dtype, in: tlen(in), out: tlen(out)}, func() pg.Work {
		return r.ProcessGroup.AllGather(ctx, out, in)
	})
}

// ReduceScatter records in and out and forwards.
func (r *Recorder) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	return r.issue(call{op: pg.OpReduceScatter, dtype: in.Dtype, in: tlen(in), out: tlen(out)}, func() pg.Work {
		return r.ProcessGroup.ReduceScatter(ctx, out, in, op)
	})
}

// Barrier records what torch's NCCL barrier records, an allreduce of
// one float32, and forwards: torch's analyzer reads the first size of
// every collective, so a barrier without sizes would stop it.
func (r *Recorder) Barrier(ctx context.Context) pg.Work {
	return r.issue(call{op: pg.OpBarrier, dtype: pg.Float32, in: 1, out: 1}, func() pg.Work {
		return r.ProcessGroup.Barrier(ctx)
	})
}

// tlen is t's element count, or its byte count when its dtype is
// unknown (a bad call, which the backend refuses; it is recorded all
// the same, as torch records what was issued).
func tlen(t pg.Tensor) int {
	if s := t.Dtype.Size(); s > 0 {
		return len(t.Data) / s
	}
	return len(t.Data)
}

// work is a recorded operation's Work: an error it returns fires the
// group's OnFailure.
type work struct {
	pg.Work
	r *Recorder
}

// Times forwards the backend's times (pg.TimedWork).
func (w *work) Times() pg.OpTimes { return pg.TimesOf(w.Work) }

// Wait waits for the operation, and reports a failure to OnFailure.
func (w *work) Wait(ctx context.Context) error {
	err := w.Work.Wait(ctx)
	if err != nil && w.Work.Err() != nil { // a failed operation, not a cancelled wait
		w.r.failed(err)
	}
	return err
}

// Err is the operation's result, reported to OnFailure if it failed.
func (w *work) Err() error {
	err := w.Work.Err()
	if err != nil {
		w.r.failed(err)
	}
	return err
}

// failed calls the group's OnFailure once.
func (r *Recorder) failed(err error) {
	if f := r.grp.onFailure; f != nil {
		r.grp.failedOnce.Do(func() { f(err) })
	}
}
