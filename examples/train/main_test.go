package main

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp/checkpoint"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDataParallelEqualsOneProcess: two ranks, each on half of every
// global batch (sampler's interleaved shares of one shuffled order), end
// with the parameters that one process gets on the whole batches, within
// floating-point tolerance; the replicas are bitwise identical; the model
// learns; rank 0's checkpoint holds the final parameters.
func TestDataParallelEqualsOneProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	c := config{nproc: 2, steps: 200, batch: 64, hidden: 32, lr: 0.1, seed: 7, timeout: time.Minute, checkpoint: dir}
	two, err := run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	c.nproc, c.checkpoint = 1, ""
	one, err := run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if !identical(two) {
		t.Fatal("the two ranks' replicas differ")
	}
	worst := 0.0
	for i := range one[0].weights {
		for k, want := range one[0].weights[i] {
			worst = max(worst, math.Abs(two[0].weights[i][k]-want)/max(1, math.Abs(want)))
		}
	}
	if worst > 1e-9 {
		t.Fatalf("2 ranks differ from 1 process on the same global batches by %g (relative), want ≤ 1e-9", worst)
	}
	if two[0].accuracy < 0.6 {
		t.Fatalf("test accuracy %.2f after %d steps; the model should beat chance (0.25) by far", two[0].accuracy, c.steps)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Step != c.steps || ck.Params["fc2.bias"][0] != two[0].weights[3][0] {
		t.Fatalf("checkpoint at step %d with fc2.bias[0] = %v, want step %d and %v", ck.Step, ck.Params["fc2.bias"][0],
			c.steps, two[0].weights[3][0])
	}
}

func TestBadBatch(t *testing.T) {
	if _, err := run(context.Background(), config{nproc: 3, batch: 64, steps: 1, timeout: time.Second}); err == nil {
		t.Fatal("a batch of 64 over 3 ranks was accepted")
	}
}
