package reducer

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// ErrEarlyTermination is returned on every rank by a Join with
// ThrowOnEarlyTermination once any rank has run out of inputs.
var ErrEarlyTermination = errors.New(
	"reducer: detected at least one rank that exhausted inputs; throwing across all ranks")

// JoinOptions configure NewJoin, after torch's Join context manager and
// DDP's join hook.
type JoinOptions struct {
	// ThrowOnEarlyTermination (throw_on_early_termination): as soon as one
	// rank runs out of inputs, every rank's next Step (and the exhausted
	// rank's Finish) returns ErrEarlyTermination, instead of shadowing.
	ThrowOnEarlyTermination bool
	// DivideByActiveRanks is torch's divide_by_initial_world_size=False:
	// the default allreduce divides each bucket by the number of ranks
	// still training, not by the world size. The default (false) is
	// torch's default, divide_by_initial_world_size=True: ranks that have
	// joined contribute zeros and the sum is divided by the world size.
	// As in torch, only the default allreduce hook honours it.
	DivideByActiveRanks bool
	// OnShadowStep, if set, runs in Finish after each iteration this rank
	// shadows, with the parameters' values (NewJoin's) and the iteration's
	// averaged gradients, both in r's order: torch's JoinHook.main_hook. It
	// is for what the training ranks do collectively after each
	// synchronised iteration, above all a sharded optimizer's step: a
	// joined rank still owns its partition, so with optim.Zero pass
	// z.StepContext, which steps this rank's parameters with the averages
	// and broadcasts them, as the training ranks' steps expect (torch's
	// _ZeROJoinHook calls zero.step()). The gradients are bitwise the
	// training ranks' averages (zeros for a parameter no rank used in the
	// iteration), valid until the call returns. It is not called for an
	// iteration whose averages are not finite (Finalize's ErrNonFinite,
	// which every rank gets): the training ranks skip that step. Its error
	// ends Finish. ddp.DDP.NewJoin gives it StepTensors' gradients.
	OnShadowStep func(ctx context.Context, params, grads []pg.Tensor) error
	// Logger receives the join's logs. nil means none.
	Logger *zap.Logger
}

// Join trains on uneven inputs, as torch.distributed.algorithms.Join with
// DDP: ranks that run out of data keep shadowing the collectives of the
// ranks still training, so nothing hangs.
//
//	j, err := reducer.NewJoin(r, values, reducer.JoinOptions{})
//	for _, batch := range myBatches { // as many as this rank has
//		if err := j.Step(ctx, true); err != nil { ... }
//		// Prepare, backward with MarkReady, Finalize, optimizer step
//	}
//	err = j.Finish(ctx) // shadows until every rank is done, then syncs the model
//
// Each Step is one small allreduce that counts the ranks still training
// (torch's notify_join_context). A rank in Finish answers those with zero,
// and while others train it runs their iteration with zero gradients:
// the same bucket collectives through the same comm hook, in the same
// (rebuilt) bucket order, the unused-parameter allreduce included (torch's
// _match_all_reduce_for_bwd_pass and _match_unused_params_allreduce).
// When no rank trains any more, every rank takes the parameters of the
// last rank to join (the highest rank among them), as torch's
// _sync_final_model does.
type Join struct {
	r      *Reducer
	values []pg.Tensor
	opts   JoinOptions
	log    *zap.Logger
	zeros  []pg.Tensor
	joined bool
}

// NewJoin prepares a Join over r. values are the parameters' values, in
// r's order: Finish overwrites them with the last joiner's.
func NewJoin(r *Reducer, values []pg.Tensor, o JoinOptions) (*Join, error) {
	if err := r.checkValues("NewJoin", values); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = r.log
	}
	return &Join{r: r, values: values, opts: o, log: log}, nil
}

// The join allreduce carries, summed over ranks: how many ranks still
// train, how many of them synchronise gradients this iteration (torch's
// _check_global_requires_backward_grad_sync), and how many have run out
// of inputs under ThrowOnEarlyTermination.
const (
	joinActive = iota
	joinSyncing
	joinThrown
	joinWidth
)

func (j *Join) exchange(ctx context.Context, mine [joinWidth]int32) ([joinWidth]int32, error) {
	buf := mine[:]
	if err := j.r.g.AllReduce(ctx, pg.Int32s(buf), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return mine, fmt.Errorf("reducer: join: counting the ranks still training: %w", err)
	}
	return [joinWidth]int32(buf), nil
}

// Step announces that this rank runs one more iteration, with
// synchronised gradients if sync (false for a no_sync micro-batch). Call it
// before each iteration's Prepare. Under ThrowOnEarlyTermination it returns
// ErrEarlyTermination once any rank has run out of inputs.
func (j *Join) Step(ctx context.Context, sync bool) error {
	if j.joined {
		return errors.New("reducer: join: Step after Finish")
	}
	mine := [joinWidth]int32{joinActive: 1}
	if sync {
		mine[joinSyncing] = 1
	}
	got, err := j.exchange(ctx, mine)
	if err != nil {
		return err
	}
	if got[joinThrown] > 0 {
		return ErrEarlyTermination
	}
	j.setDivisor(got)
	if int(got[joinActive]) < j.r.g.Size() {
		j.r.mu.Lock()
		_, _ = j.r.m.step(evJoin{othersJoined: true}, nil) // the joined ranks stop stepping: Note [replica check]
		j.r.mu.Unlock()
	}
	return nil
}

func (j *Join) setDivisor(counts [joinWidth]int32) {
	if !j.opts.DivideByActiveRanks {
		return
	}
	j.r.mu.Lock()
	j.r.divisor = int(counts[joinSyncing])
	j.r.mu.Unlock()
}

// Finish is called once this rank has no more inputs. It shadows the
// other ranks' iterations until none trains any more, then copies the
// parameters of the last rank to join into values on every rank. Under
// ThrowOnEarlyTermination it tells the others and returns
// ErrEarlyTermination, unless every rank ran out in the same iteration.
func (j *Join) Finish(ctx context.Context) error {
	if j.joined {
		return errors.New("reducer: join: Finish called twice")
	}
	j.joined = true
	defer func() {
		j.r.mu.Lock()
		j.r.divisor = 0
		_, _ = j.r.m.step(evJoin{othersJoined: false}, nil) // syncFinalModel made the replicas equal again
		j.r.mu.Unlock()
	}()
	mine := [joinWidth]int32{}
	if j.opts.ThrowOnEarlyTermination {
		mine[joinThrown] = 1
	}
	lastJoiner := true
	shadowed := 0
	for {
		got, err := j.exchange(ctx, mine)
		if err != nil {
			return err
		}
		if got[joinActive] == 0 {
			break // every rank ran out at once: nobody is left to throw at, as in torch
		}
		if got[joinThrown] > 0 {
			return fmt.Errorf("%w (rank %d exhausted all inputs)", ErrEarlyTermination, j.r.g.Rank())
		}
		lastJoiner = false
		if got[joinSyncing] > 0 {
			j.setDivisor(got)
			if err := j.shadow(ctx); err != nil {
				return err
			}
			shadowed++
		}
	}
	j.log.Info("joined: every rank is out of inputs", zap.Int("shadowed_iterations", shadowed),
		zap.Bool("last_joiner", lastJoiner))
	return j.syncFinalModel(ctx, lastJoiner)
}

// shadow runs one synchronised iteration with zero gradients: the same
// collectives the training ranks issue, contributing nothing; then
// OnShadowStep, with the averages.
func (j *Join) shadow(ctx context.Context) error {
	r := j.r
	if j.zeros == nil {
		j.zeros = make([]pg.Tensor, len(r.params))
	}
	for i := range j.zeros {
		if j.zeros[i].Data == nil {
			j.zeros[i] = pg.NewTensor(r.dtypes[i], r.numel[i]) // the gradients' dtype
		} else {
			clear(j.zeros[i].Data) // Finalize wrote the last results into them
		}
	}
	if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
		return fmt.Errorf("reducer: join: shadowing an iteration: %w", err)
	}
	staticUnused := r.staticUnused()
	for i := len(j.zeros) - 1; i >= 0; i-- { // the order backward produces them
		if staticUnused != nil && staticUnused[i] {
			continue // Prepare marks StaticGraph's unused set ready, as in this rank's own iterations
		}
		if err := r.MarkReady(i, j.zeros[i]); err != nil {
			return fmt.Errorf("reducer: join: shadowing an iteration: %w", err)
		}
	}
	// A NonFiniteError leaves the iteration complete; the training ranks
	// decide what to do about it (CheckFinite), and skip the step.
	err := r.Finalize(ctx)
	switch {
	case errors.Is(err, ErrNonFinite):
		return nil
	case err != nil:
		return fmt.Errorf("reducer: join: shadowing an iteration: %w", err)
	case j.opts.OnShadowStep != nil:
		if err := j.opts.OnShadowStep(ctx, j.values, j.zeros); err != nil {
			return fmt.Errorf("reducer: join: OnShadowStep: %w", err)
		}
	}
	return nil
}

// staticUnused is this rank's StaticGraph unused set, which its first
// iteration found (nil before it, or without StaticGraph). It is the
// machine's, which replaces rather than changes it: read only.
func (r *Reducer) staticUnused() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m.status().staticUnused
}

// syncFinalModel agrees on the authoritative rank, the highest among the
// last joiners (torch's _find_common_rank: an allreduce MAX of the rank,
// or -1), and broadcasts its parameters.
func (j *Join) syncFinalModel(ctx context.Context, lastJoiner bool) error {
	cand := []int64{-1}
	if lastJoiner {
		cand[0] = int64(j.r.g.Rank())
	}
	if err := j.r.g.AllReduce(ctx, pg.Int64s(cand), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: join: agreeing on the final model's rank: %w", err)
	}
	if cand[0] < 0 {
		// unreachable: the first to see zero active ranks is one
		return errors.New("reducer: join: no rank was a last joiner")
	}
	return j.r.broadcastParamsFrom(ctx, j.values, int(cand[0]))
}
