package desync

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"go.uber.org/zap"
)

// Store keys, under "desync/<name>/":
//
//	request     set by the first rank that diagnoses; wakes every rank's responder
//	progress/R  rank R's published progress (a JSON report)
//	verdict     set by each rank that has finished its diagnosis
const (
	keyRequest = "request"
	keyVerdict = "verdict"
)

// lastLook is how long a rank still waits for a peer's progress once
// another rank has finished its diagnosis.
const lastLook = 200 * time.Millisecond

func keyProgress(rank int) string { return "progress/" + strconv.Itoa(rank) }

// responderWindow is how long one parked Wait of the responder lasts
// before it is renewed.
const responderWindow = time.Minute

// kindOf returns the sentinel among ErrTimeout, ErrComm and ErrRemote
// that err carries (a CollectiveError's Kind first), or nil.
func kindOf(err error) error {
	var ce *pg.CollectiveError
	if errors.As(err, &ce) {
		switch ce.Kind {
		case pg.ErrTimeout, pg.ErrComm, pg.ErrRemote:
			return ce.Kind
		}
	}
	for _, k := range []error{pg.ErrTimeout, pg.ErrComm, pg.ErrRemote} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// diagnosable reports whether err is a stall to explain: a timeout,
// communication or remote error, and not this rank's own abort or close,
// an argument error or a mismatch already explained.
func diagnosable(err error) bool {
	if kindOf(err) == nil {
		return false
	}
	for _, own := range []error{pg.ErrAborted, pg.ErrClosed, pg.ErrInvalidArgument, pg.ErrMismatch, pg.ErrUnsupported} {
		if errors.Is(err, own) {
			return false
		}
	}
	var se *pg.StallError
	return !errors.As(err, &se)
}

// explain turns the failed collective's error into a *pg.StallError
// carrying the group's diagnosis. The first call starts the diagnosis;
// every call waits for it, or returns err as it is if ctx ends first (a
// later call still gets the diagnosis).
func (g *Group) explain(ctx context.Context, seq uint64, op pg.OpType, err error) error {
	if !diagnosable(err) {
		return err
	}
	select {
	case <-g.startDiagnosis(seq, op):
	case <-ctx.Done():
		return err
	}
	g.diagMu.Lock()
	d := g.diag
	g.diagMu.Unlock()
	if d == nil { // the Group closed first
		return err
	}
	se := *d
	se.Kind, se.Err = kindOf(err), err
	return &se
}

// startDiagnosis starts the group's diagnosis, about collective seq, the
// first time it is called, and returns a channel closed once g.diag is
// set (or left nil, if the Group is closing).
func (g *Group) startDiagnosis(seq uint64, op pg.OpType) <-chan struct{} {
	g.diagMu.Lock()
	defer g.diagMu.Unlock()
	if g.diagDone != nil {
		return g.diagDone
	}
	done := make(chan struct{})
	g.diagDone = done
	if g.closing {
		close(done)
		return done
	}
	g.workers.Add(1)
	go func() {
		defer g.workers.Done()
		defer close(done)
		d := g.diagnose(seq, op)
		if g.life.Err() != nil {
			return // closed mid-way: the findings are incomplete, keep the errors as they are
		}
		g.log.Error("desync: collective failed; diagnosis", zap.Error(d))
		g.diagMu.Lock()
		g.diag = d
		g.diagMu.Unlock()
	}()
	return done
}

// diagnose asks every rank for its progress through the store and works
// out who stalled collective seq: ranks that had not entered it, ranks
// that did not answer, ranks that issued something else as seq. It is
// bounded by Options.DiagnosisTimeout (and Options.ProbeTimeout, for the
// network probes of a large group) and by Close.
func (g *Group) diagnose(seq uint64, op pg.OpType) *pg.StallError {
	ctx, cancel := context.WithTimeout(g.life, g.opts.DiagnosisTimeout)
	defer cancel()
	se := &pg.StallError{Rank: g.rank, Op: op, Seq: seq, StoreHost: g.opts.StoreHost,
		Progress:    make([]pg.RankProgress, g.size),
		ParentRanks: g.opts.parentRanks}
	if g.opts.sub {
		se.Group = g.opts.Name
	}
	probes := g.startProbes() // network or process: probe.go
	reports := make([]*progress, g.size)
	g.mu.Lock()
	g.settleLocked()
	mine := g.prog
	g.mu.Unlock()
	reports[g.rank] = &mine

	if err := g.st.Set(ctx, keyRequest, []byte(strconv.Itoa(g.rank))); err != nil {
		se.StoreErr = err
	} else if err := g.publish(ctx); err != nil {
		se.StoreErr = err
	} else {
		g.gather(ctx, reports, se)
	}

	var at []int // ranks that reported what they issued as seq
	var fps []fingerprint
	for r := range g.size {
		p := reports[r]
		rp := pg.RankProgress{Rank: r}
		if p != nil {
			rp.Answered, rp.Entered, rp.EnteredOp, rp.Finished = true, p.entered, p.op, p.finished
			if fp, ok := p.at(seq); ok {
				rp.AtSeq = fp.String()
				at, fps = append(at, r), append(fps, fp)
			}
			if p.entered < seq {
				se.Behind = append(se.Behind, r)
			}
		}
		se.Progress[r] = rp
	}
	se.Mismatched = minority(at, fps)
	probes.apply(se) // network or process: probe.go
	if se.StoreErr == nil {
		se.StoreHost = pg.NoPeer
	}
	return se
}

// gather reads every other rank's published progress into reports,
// waiting until ctx ends for those not yet published. A rank that has
// finished its own diagnosis publishes a verdict; once one appears, the
// ranks still missing get a last short look and are then silent, so
// every rank ends its diagnosis about when the first one did.
func (g *Group) gather(ctx context.Context, reports []*progress, se *pg.StallError) {
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	var verdictSeen atomic.Bool
	var watcher sync.WaitGroup
	defer watcher.Wait()
	defer stop()
	watcher.Go(func() {
		if _, err := g.st.Get(gctx, keyVerdict); err == nil {
			verdictSeen.Store(true)
			stop()
		}
	})
	var mu sync.Mutex
	var unread []int
	var storeErr error
	var wg sync.WaitGroup
	for r := range g.size {
		if r == g.rank {
			continue
		}
		wg.Go(func() {
			b, err := g.st.Get(gctx, keyProgress(r))
			if err != nil && verdictSeen.Load() && ctx.Err() == nil {
				last, cancel := context.WithTimeout(ctx, lastLook)
				b, err = g.st.Get(last, keyProgress(r))
				cancel()
			}
			var p *progress
			if err == nil {
				p, err = parseReport(b, r)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				reports[r] = p
			case errors.Is(err, pg.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
				se.Silent = append(se.Silent, r)
			default:
				unread = append(unread, r)
				if storeErr == nil {
					storeErr = err
				}
			}
		})
	}
	wg.Wait()
	stop()
	// The store went away during the diagnosis. If its host had
	// answered, or another rank had finished its diagnosis, the host's
	// process has simply ended after its own diagnosis: the ranks not
	// read by then had not answered for as long as the others waited.
	// Otherwise the store is the problem, and they are unknown.
	host := g.opts.StoreHost
	if storeErr != nil {
		if verdictSeen.Load() || (host != pg.NoPeer && reports[host] != nil) {
			se.Silent = append(se.Silent, unread...)
		} else {
			se.StoreErr = storeErr
		}
	}
	slices.Sort(se.Silent)
	// Tell the ranks still waiting; best effort, they time out anyway.
	vctx, cancel := context.WithTimeout(g.life, lastLook)
	defer cancel()
	_ = g.st.Set(vctx, keyVerdict, []byte(strconv.Itoa(g.rank)))
}

// minority returns the ranks (at[i] issued fps[i]) outside the largest
// set that issued the same collective; ties go to the set holding the
// lowest rank, so every rank names the same ones.
func minority(at []int, fps []fingerprint) []int {
	best, bestCount := 0, 0
	for i := range fps {
		count := 0
		for j := range fps {
			if fps[j].same(fps[i]) {
				count++
			}
		}
		if count > bestCount {
			best, bestCount = i, count
		}
	}
	var out []int
	for i, r := range at {
		if !fps[i].same(fps[best]) {
			out = append(out, r)
		}
	}
	return out
}

// publish puts this rank's progress in the store, once: the responder
// does it when another rank asks, the diagnosing rank before it reads.
func (g *Group) publish(ctx context.Context) error {
	g.mu.Lock()
	if g.published {
		g.mu.Unlock()
		return nil
	}
	g.settleLocked()
	b, err := json.Marshal(g.prog.report(g.rank))
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if err := g.st.Set(ctx, keyProgress(g.rank), b); err != nil {
		return err
	}
	g.mu.Lock()
	g.published = true
	g.mu.Unlock()
	return nil
}

// respond waits for another rank's diagnosis request and answers it with
// this rank's progress. It runs until Close: a rank that is alive but not
// failing (behind, stuck outside the collectives) still answers.
func (g *Group) respond() {
	defer g.workers.Done()
	for {
		ctx, cancel := context.WithTimeout(g.life, responderWindow)
		err := g.st.Wait(ctx, keyRequest)
		cancel()
		switch {
		case g.life.Err() != nil || errors.Is(err, store.ErrClosed):
			return
		case err == nil:
			ctx, cancel := context.WithTimeout(g.life, g.opts.DiagnosisTimeout)
			if err := g.publish(ctx); err != nil {
				g.log.Warn("desync: could not publish progress for a diagnosis", zap.Error(err))
			}
			cancel()
			return
		case !errors.Is(err, pg.ErrTimeout):
			// The store failed (its host may be gone); try again later.
			select {
			case <-g.life.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}
