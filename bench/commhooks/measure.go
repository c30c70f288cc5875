package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/reducer"
)

// startIter is when the PowerSGD hooks start compressing; warmup steps
// run before anything is measured (the first rebuilds the buckets).
const (
	startIter = 2
	warmup    = 3
)

// hookSpec names a hook and makes one per rank.
type hookSpec struct {
	label string
	make  func() (commhook.Hook, error)
}

func hookSpecs(ranks []int) []hookSpec {
	specs := []hookSpec{
		{"allreduce", func() (commhook.Hook, error) { return commhook.Allreduce{}, nil }},
		{"fp16", func() (commhook.Hook, error) { return commhook.FP16Compress(), nil }},
		{"bf16", func() (commhook.Hook, error) { return commhook.BF16Compress(), nil }},
	}
	for _, batched := range []bool{false, true} {
		for _, r := range ranks {
			o := commhook.DefaultPowerSGDOptions()
			o.StartIter, o.MatrixApproximationRank = startIter, r
			label := fmt.Sprintf("powersgd rank %d", r)
			mk := func() (commhook.Hook, error) { return commhook.NewPowerSGD(o) }
			if batched {
				label = "batched-" + label
				mk = func() (commhook.Hook, error) { return commhook.NewBatchedPowerSGD(o) }
			}
			specs = append(specs, hookSpec{label, mk})
		}
	}
	return specs
}

// row is one hook's figures.
type row struct {
	label       string
	gradBytes   int     // the gradients, in bytes
	bytes       int64   // handed to allreduce per step, per rank
	collectives int64   // calls per step, per rank: all allreduces for these hooks
	torchRate   float64 // torch's compression_stats rate; 0 if none
	cpuPerMiB   time.Duration
}

// params are the MLP's parameters as ddpstep's model has them.
func params(sizes []int) []reducer.Param {
	var ps []reducer.Param
	for l := 1; l < len(sizes); l++ {
		ps = append(ps,
			reducer.Param{Name: fmt.Sprintf("fc%d.weight", l), Shape: []int{sizes[l-1], sizes[l]}, Dtype: pg.Float32},
			reducer.Param{Name: fmt.Sprintf("fc%d.bias", l), Shape: []int{1, sizes[l]}, Dtype: pg.Float32})
	}
	return ps
}

func measure(ctx context.Context, o options, h hookSpec) (row, error) {
	r := row{label: h.label}
	plan, err := countBytes(ctx, o, h, &r)
	if err != nil {
		return r, err
	}
	return r, timeCPU(ctx, o, h, plan, &r)
}

// countBytes trains random gradients through the reducer on nproc local
// ranks and counts rank 0's bytes in the step after warmup. It returns
// the bucket plan.
func countBytes(ctx context.Context, o options, h hookSpec, r *row) ([][]int, error) {
	gs, err := local.New(o.nproc, local.Options{Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	ps := params(o.sizes)
	counter := instrument.Count(gs[0]) // the reducer's count of hook bytes (ddp_comm_bytes_total) is one too
	var plan [][]int
	var hook0 commhook.Hook
	var bytes0, calls0 int64 // rank 0's counts before the measured step
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for rank := range gs {
		g := pg.ProcessGroup(gs[rank])
		if rank == 0 {
			g = counter
		}
		wg.Go(func() {
			hook, err := h.make()
			if err != nil {
				errs[rank] = err
				return
			}
			red, err := reducer.New(ctx, g, ps, reducer.Options{Hook: hook})
			if err != nil {
				errs[rank] = err
				return
			}
			grads := newGrads(ps)
			rng := rand.New(rand.NewPCG(uint64(rank), 1))
			for step := range warmup + 1 {
				if step == warmup && rank == 0 {
					bytes0, calls0 = counter.Bytes(), counter.Calls()
				}
				if errs[rank] = reducerStep(ctx, red, grads, rng); errs[rank] != nil {
					return
				}
			}
			if rank == 0 {
				plan, hook0 = red.Buckets(), hook
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	r.bytes, r.collectives = counter.Bytes()-bytes0, counter.Calls()-calls0
	for _, p := range ps {
		r.gradBytes += 4 * p.Numel()
	}
	if s, ok := hook0.(interface {
		CompressionStats() (float64, int, int)
	}); ok {
		r.torchRate, _, _ = s.CompressionStats()
	}
	return plan, nil
}

func newGrads(ps []reducer.Param) [][]float32 {
	grads := make([][]float32, len(ps))
	for i, p := range ps {
		grads[i] = make([]float32, p.Numel())
	}
	return grads
}

func randomize(grads [][]float32, rng *rand.Rand) {
	for _, g := range grads {
		for j := range g {
			g[j] = float32(rng.NormFloat64() * 1e-2)
		}
	}
}

// reducerStep is one synchronised iteration, gradients ready last first.
func reducerStep(ctx context.Context, red *reducer.Reducer, grads [][]float32, rng *rand.Rand) error {
	randomize(grads, rng)
	if err := red.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
		return err
	}
	for i := len(grads) - 1; i >= 0; i-- {
		if err := red.MarkReady(i, pg.Float32s(grads[i])); err != nil {
			return err
		}
	}
	return red.Finalize(ctx)
}

// solo is a group of one rank whose allreduce does nothing (a sum over
// one rank is the identity), so that only the hook's own work is timed.
type solo struct{ pg.ProcessGroup }

// Inner is the group of one rank, for pg.As.
func (s solo) Inner() pg.ProcessGroup { return s.ProcessGroup }

func (solo) AllReduce(context.Context, pg.Tensor, pg.ReduceOp) pg.Work { return pg.Completed(nil) }

// timeCPU runs the hook alone on one rank, bucket by bucket as plan lays
// them out, and records its time per MiB of gradients.
func timeCPU(ctx context.Context, o options, h hookSpec, plan [][]int, r *row) error {
	gs, err := local.New(1, local.Options{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer gs[0].Close()
	hook, err := h.make()
	if err != nil {
		return err
	}
	ps := params(o.sizes)
	buckets := gradBuckets(ps, plan)
	rng := rand.New(rand.NewPCG(9, 9))
	var total time.Duration
	for step := range warmup + o.steps {
		for _, b := range buckets {
			s := pg.View[float32](b.Buffer)
			for i := range s {
				s[i] = float32(rng.NormFloat64() * 1e-2)
			}
		}
		start := time.Now()
		for _, b := range buckets {
			if err := hook.Run(ctx, solo{gs[0]}, b).Wait(ctx); err != nil {
				return err
			}
		}
		if step >= warmup {
			total += time.Since(start)
		}
	}
	mib := float64(r.gradBytes) / (1 << 20)
	r.cpuPerMiB = time.Duration(float64(total) / float64(o.steps) / mib)
	return nil
}

// gradBuckets lays out the parameters as the reducer's plan does.
func gradBuckets(ps []reducer.Param, plan [][]int) []*commhook.GradBucket {
	out := make([]*commhook.GradBucket, len(plan))
	for b, idx := range plan {
		gb := &commhook.GradBucket{Index: b, IsLast: b == len(plan)-1}
		off := 0
		for _, i := range idx {
			n := ps[i].Numel()
			gb.Params = append(gb.Params,
				commhook.ParamView{Index: i, Name: ps[i].Name, Shape: ps[i].Shape, Offset: off, Len: n})
			off += n
		}
		gb.Buffer = pg.NewTensor(pg.Float32, off)
		out[b] = gb
	}
	return out
}
