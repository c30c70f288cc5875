package gomlxddp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
)

// TestJoin: rank 0 has 5 batches, rank 1 has 3. With a Join nothing
// hangs; after Finish both ranks hold every variable (Adam's state
// included) with rank 0's bits, count 5 steps, and train on together.
func TestJoin(t *testing.T) {
	const size, rows = 2, 12
	batches := []int{5, 3}
	groups := tcpGroups(t, size)
	got := onRanks(t, groups, func(r int) (map[string][]float64, error) { return joinRank(groups[r], batches[r], rows) })
	checkBitwise(t, 1, got[1], got[0])
}

// joinRank trains on its n batches under a Join, then one step more with
// every rank, and returns every float64 variable.
func joinRank(g pg.ProcessGroup, n, rows int) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("adam")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, opt, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	step := func(s int) error {
		x, y := batch(s, rows)
		_, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())})
		return err
	}
	x, y := batch(0, rows)
	if err := tr.Setup(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
		[]*tensors.Tensor{shard(y, g.Rank(), g.Size())}); err != nil {
		return nil, err
	}
	j, err := tr.NewJoin(reducer.JoinOptions{})
	if err != nil {
		return nil, err
	}
	for s := range n {
		if err := j.Step(ctx); err != nil {
			return nil, err
		}
		if err := step(s); err != nil {
			return nil, err
		}
	}
	if err := j.Finish(ctx); err != nil {
		return nil, err
	}
	if tr.Steps() != 5 {
		return nil, fmt.Errorf("%d steps after Finish, want the last joiner's 5", tr.Steps())
	}
	if err := step(5); err != nil { // together again
		return nil, err
	}
	return allValues(c)
}
