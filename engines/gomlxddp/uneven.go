package gomlxddp

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// Join trains on uneven inputs (torch's Join with DDP, reducer.Join):
// call Step before each TrainStep while this rank has data, and Finish
// when it has none. Finish shadows the other ranks' steps until every rank
// is done, then gives every rank the variables of the last rank to join,
// the optimizer's state included.
//
//	tr.Setup(ctx, x0, y0) // the first batch's shapes
//	j, err := tr.NewJoin(reducer.JoinOptions{})
//	for _, b := range myBatches {
//		if err := j.Step(ctx); err != nil { ... }
//		loss, err := tr.TrainStep(ctx, b.x, b.y)
//	}
//	err = j.Finish(ctx)
type Join struct {
	t      *Trainer
	j      *reducer.Join
	values []pg.Tensor // the trainable variables, for the reducer's final sync
}

// NewJoin starts a Join. Call it after Setup, on every rank.
// Options.BroadcastBuffers is refused: its broadcast after each step is a
// collective that a joined rank would not shadow.
func (t *Trainer) NewJoin(o reducer.JoinOptions) (*Join, error) {
	switch {
	case t.r == nil:
		return nil, errors.New("gomlxddp: NewJoin before Setup: the variables do not exist yet")
	case t.opts.BroadcastBuffers:
		return nil, errors.New("gomlxddp: Join with Options.BroadcastBuffers is not supported: a rank that has joined " +
			"would miss the buffers' broadcast")
	}
	values := make([]pg.Tensor, len(t.params))
	for i := range t.params {
		values[i] = pg.NewTensor(t.grads[i].Dtype, t.grads[i].Len())
	}
	j, err := reducer.NewJoin(t.r, values, o)
	if err != nil {
		return nil, err
	}
	return &Join{t: t, j: j, values: values}, nil
}

// Step announces one more TrainStep on this rank. It is collective.
func (j *Join) Step(ctx context.Context) error {
	ctx, cancel := j.t.bound(ctx)
	defer cancel()
	return j.j.Step(ctx, true)
}

// Finish is called once this rank has no more inputs. It shadows the
// others' steps until none trains, then every rank takes the variables of
// the last rank to join (every variable of the context: the optimizer's
// state and step too). It is collective.
func (j *Join) Finish(ctx context.Context) error {
	ctx, cancel := j.t.bound(ctx)
	defer cancel()
	if err := j.j.Finish(ctx); err != nil {
		return err
	}
	// The reducer has synchronised the trainable variables' host copies
	// (unused here); the last joiner, the rank with the most steps (the
	// highest such rank, as the reducer picks it), sends every variable.
	g := j.t.group
	key := []int64{int64(j.t.steps)*int64(g.Size()) + int64(g.Rank())}
	if err := g.AllReduce(ctx, pg.Int64s(key), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return fmt.Errorf("gomlxddp: join: finding the last rank to join: %w", err)
	}
	j.t.steps = int(key[0] / int64(g.Size()))
	return broadcastVariablesFrom(ctx, g, variables(j.t.mctx), int(key[0]%int64(g.Size())))
}
