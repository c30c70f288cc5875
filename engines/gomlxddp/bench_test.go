package gomlxddp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// benchModel is a benchmark's model: an MLP in float32 with 10 classes,
// on batches of batch rows.
type benchModel struct {
	name      string
	batch, in int
	hidden    []int
}

// The benchmark's models: "mlp85k", 64 → 256 → 256 → 10 (85k
// parameters, 340 KB of gradients) on 64 rows, and "tiny", 8 → 16 → 10
// (314 parameters) on 8 rows, where a step's fixed costs show.
var benchModels = []benchModel{
	{name: "mlp85k", batch: 64, in: 64, hidden: []int{256, 256}},
	{name: "tiny", batch: 8, in: 8, hidden: []int{16}},
}

func (m benchModel) fn(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := inputs[0]
	for i, n := range m.hidden {
		x = graph.Tanh(layers.Dense(ctx.Inf("fc%d", i), x, true, n))
	}
	return []*graph.Node{layers.Dense(ctx.In("logits"), x, true, 10)}
}

func (m benchModel) data(rows int) (*tensors.Tensor, *tensors.Tensor) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, rows*m.in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int32, rows)
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	return tensors.FromFlatDataAndDimensions(x, rows, m.in), tensors.FromFlatDataAndDimensions(y, rows, 1)
}

// BenchmarkStep: one training step (Adam) of the same model on the same
// batch, by GoMLX's own Trainer ("gomlx", the reference: one program per
// step, with its loss metrics) and by a gomlxddp Trainer on a tcp group of
// one rank ("ddp-1": the split step, the host copies, the reducer and its
// one-rank allreduce) and of two ranks in this process, each on half the
// batch ("ddp-2": ns/op is one step of the pair, sharing this machine's
// cores). ddp-1 against gomlx is the overhead of DDP itself.
func BenchmarkStep(b *testing.B) {
	for _, m := range benchModels {
		b.Run(m.name+"/gomlx", func(b *testing.B) { benchGoMLX(b, m) })
		for _, size := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/ddp-%d", m.name, size), func(b *testing.B) { benchDDP(b, m, size) })
		}
	}
}

func benchGoMLX(b *testing.B, m benchModel) {
	c := newContext(seed)
	tr := train.NewTrainer(newBackend(b), c, m.fn, losses.SparseCategoricalCrossEntropyLogits, optimizers.Adam().Done(),
		nil, nil)
	x, y := m.data(m.batch)
	step := func() {
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
			b.Fatal(err)
		}
	}
	step() // compile
	b.ResetTimer()
	for range b.N {
		step()
	}
}

func benchDDP(b *testing.B, m benchModel, size int) {
	groups := tcpGroups(b, size)
	trainers := make([]*gomlxddp.Trainer, size)
	for r := range size {
		c := newContext(seed)
		tr, err := gomlxddp.New(newBackend(b), c, groups[r], m.fn, losses.SparseCategoricalCrossEntropyLogits,
			optimizers.Adam().Done(), gomlxddp.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		trainers[r] = tr
	}
	xs, ys := make([]*tensors.Tensor, size), make([]*tensors.Tensor, size)
	for r := range size { // a tensor belongs to one backend
		xs[r], ys[r] = m.data(m.batch / size)
	}
	run := func(steps int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		errs := make([]error, size)
		var wg sync.WaitGroup
		for r := range size {
			wg.Go(func() {
				for range steps {
					if _, err := trainers[r].TrainStep(ctx, []*tensors.Tensor{xs[r]}, []*tensors.Tensor{ys[r]}); err != nil {
						errs[r] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run(1) // set up, compile
	b.ResetTimer()
	run(b.N)
}

// BenchmarkOverhead pairs the two: each iteration runs one step of GoMLX's
// Trainer and one of a gomlxddp Trainer on a one-rank tcp group, same
// model and batch, back to back, and reports each one's mean and their
// ratio (ddp/gomlx). Pairing the steps cancels the drift of a shared
// machine's load, which separate sub-benchmarks do not.
func BenchmarkOverhead(b *testing.B) {
	for _, m := range benchModels {
		b.Run(m.name, func(b *testing.B) {
			ref := train.NewTrainer(newBackend(b), newContext(seed), m.fn, losses.SparseCategoricalCrossEntropyLogits,
				optimizers.Adam().Done(), nil, nil)
			tr, err := gomlxddp.New(newBackend(b), newContext(seed), tcpGroups(b, 1)[0], m.fn,
				losses.SparseCategoricalCrossEntropyLogits, optimizers.Adam().Done(), gomlxddp.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			refX, refY := m.data(m.batch)
			x, y := m.data(m.batch)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var inRef, inDDP time.Duration
			for i := range b.N + 1 { // the first pair compiles, untimed
				t0 := time.Now()
				if _, err := ref.TrainStep(nil, []*tensors.Tensor{refX}, []*tensors.Tensor{refY}); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := tr.TrainStep(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					inRef += t1.Sub(t0)
					inDDP += time.Since(t1)
				}
			}
			b.ReportMetric(float64(inRef.Nanoseconds())/float64(b.N), "gomlx-ns/step")
			b.ReportMetric(float64(inDDP.Nanoseconds())/float64(b.N), "ddp-ns/step")
			b.ReportMetric(float64(inDDP)/float64(inRef), "ddp/gomlx")
		})
	}
}
