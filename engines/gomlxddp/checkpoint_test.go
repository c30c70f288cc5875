package gomlxddp_test

import (
	"context"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
)

// TestCheckpointResume: two ranks train with Adam, rank 0 saves a GoMLX
// checkpoint (variables, Adam's moments, the global step) half way; a
// new job where only rank 0 loads it, and rank 1 starts from other
// random values, ends with the same bits as the job that never stopped.
func TestCheckpointResume(t *testing.T) {
	const size, half, rows = 2, 5, 12
	dir := t.TempDir()
	whole := runPhases(t, size, rows, [][2]int{{0, 2 * half}}, "", "")
	first := runPhases(t, size, rows, [][2]int{{0, half}}, "", dir)
	resumed := runPhases(t, size, rows, [][2]int{{half, 2 * half}}, dir, "")
	for r := range size {
		checkBitwise(t, r, resumed[r], whole[0])
	}
	for name, w := range whole[0] {
		if first[0][name][0] == w[0] {
			t.Fatalf("%s: half the steps already end where all of them do: the test checks nothing", name)
		}
	}
}

// runPhases trains steps [from, to) of each phase on size ranks over
// tcp. Rank 0 loads the checkpoint in load first, if any, and saves one
// in save at the end, if any. It returns each rank's trainable values.
func runPhases(t *testing.T, size, rows int, phases [][2]int, load, save string) []map[string][]float64 {
	t.Helper()
	groups := tcpGroups(t, size)
	out := onRanks(t, groups,
		func(r int) (map[string][]float64, error) { return checkpointRank(groups[r], rows, phases, load, save) })
	return out
}

func checkpointRank(g pg.ProcessGroup, rows int, phases [][2]int, load, save string) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(1000*g.Rank()))
	var ckpt *checkpoints.Handler
	if g.Rank() == 0 && (load != "" || save != "") {
		if ckpt, err = checkpoints.Build(c).Dir(load + save).Done(); err != nil {
			return nil, err
		}
	}
	o, err := optimizerByName("adam")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, o, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for _, p := range phases {
		for s := p[0]; s < p[1]; s++ {
			x, y := batch(s, rows)
			if _, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
				[]*tensors.Tensor{shard(y, g.Rank(), g.Size())}); err != nil {
				return nil, err
			}
		}
	}
	if save != "" && ckpt != nil {
		if err := ckpt.Save(); err != nil {
			return nil, err
		}
	}
	return values(c)
}
