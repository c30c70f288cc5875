package model

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	ddp "github.com/goddp/ddp"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/reducer"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// replica is one DDP rank's model.
type replica struct {
	p   *Params
	net *Net
	ddp *ddp.DDP
	vm  gorgonia.VM
}

// newReplica builds a rank's model, wrapped for DDP. Graph construction
// is serialised by mu: Gorgonia's is not safe for concurrent use. Wrap is
// collective, so it runs outside the lock.
func newReplica(ctx context.Context, mu *sync.Mutex, g pg.ProcessGroup, spec Spec, seed uint64) (*replica, error) {
	mu.Lock()
	p, err := NewParams(spec, seed)
	mu.Unlock()
	if err != nil {
		return nil, err
	}
	d, err := ddp.Wrap(ctx, g, p.Nodes, reducer.Options{BucketCapBytes: 4 << 10, FirstBucketBytes: 1 << 10})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	net, err := p.Forward(spec, d.Node)
	if err != nil {
		return nil, err
	}
	if _, err := d.Grad(net.Loss); err != nil {
		return nil, err
	}
	return &replica{p: p, net: net, ddp: d, vm: gorgonia.NewTapeMachine(p.Graph)}, nil
}

// train runs steps synchronised steps; batch(s) gives this rank's rows.
func (r *replica) train(ctx context.Context, spec Spec, opt optim.Optimizer, steps int,
	batch func(step int) ([]float64, []int)) error {
	defer r.vm.Close()
	for s := range steps {
		x, labels := batch(s)
		if err := r.net.Feed(spec, x, labels); err != nil {
			return err
		}
		if err := r.ddp.RunAll(ctx, r.vm); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		ps, gs, err := optim.NodeTensors(r.p.Nodes)
		if err != nil {
			return err
		}
		if err := opt.Step(ps, gs); err != nil {
			return err
		}
		r.vm.Reset()
	}
	return nil
}

func (r *replica) values() [][]float64 {
	out := make([][]float64, r.p.Len())
	for i := range out {
		out[i] = r.p.Value(i)
	}
	return out
}

// Two in-process ranks train the MLP and the CNN under DDP, each on its
// half of every batch, the last batch short. The replicas stay bitwise
// equal, and equal to one process trained on the whole batches.
func TestDDPReplicasStayEqual(t *testing.T) {
	cases := []Spec{
		mlpSpec(tensor.Float64, 4, 8, 8),
		mlpSpec(tensor.Float32, 4, 8, 8),
		{Kind: "cnn", InputShape: []int{1, 12, 12}, Activation: "relu", Classes: 3, Dtype: tensor.Float64, Batch: 4},
	}
	for _, spec := range cases {
		t.Run(spec.Kind+"/"+spec.Dtype.String(), func(t *testing.T) {
			const ranks, steps = 2, 4
			rows := func(s int) int { return spec.Batch - 1*(s/(steps-1)) } // the last step is short
			global := func(s int) ([]float64, []int) { return data(spec, ranks*rows(s), uint64(100+s)) }
			shard := func(rank int) func(int) ([]float64, []int) {
				return func(s int) ([]float64, []int) {
					x, labels := global(s)
					n, d := rows(s), spec.Features()
					return x[rank*n*d : (rank+1)*n*d], labels[rank*n : (rank+1)*n]
				}
			}

			gs, err := local.New(ranks, local.Options{Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, g := range gs {
					g.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			final := make([][][]float64, ranks)
			errs := make([]error, ranks)
			var wg sync.WaitGroup
			for rank, g := range gs {
				wg.Go(func() {
					// Different seeds: Wrap must make rank 0's values everyone's.
					r, err := newReplica(ctx, &mu, g, spec, uint64(7+rank))
					if err != nil {
						errs[rank] = err
						return
					}
					opt, _ := optim.New("momentum", 0.1, r.p.Len())
					errs[rank] = r.train(ctx, spec, opt, steps, shard(rank))
					final[rank] = r.values()
				})
			}
			wg.Wait()
			for rank, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			for i := range final[0] {
				if !slices.Equal(final[0][i], final[1][i]) {
					t.Fatalf("after %d steps the ranks' %s differ", steps, spec.Kind)
				}
			}

			// One process on the whole batches, from rank 0's seed.
			whole := spec
			whole.Batch = ranks * spec.Batch
			ref := newPlain(t, whole, 7)
			opt, _ := optim.New("momentum", 0.1, ref.p.Len())
			for s := range steps {
				x, labels := global(s)
				ref.run(t, x, labels) // leaves the gradients in the nodes until the next run
				ps, grads, err := optim.NodeTensors(ref.p.Nodes)
				if err != nil {
					t.Fatal(err)
				}
				if err := opt.Step(ps, grads); err != nil {
					t.Fatal(err)
				}
			}
			want := make([][]float64, ref.p.Len())
			for i := range want {
				want[i] = ref.p.Value(i)
			}
			tol := 1e-12
			if spec.Dtype == tensor.Float32 {
				tol = 1e-5
			}
			if e := maxRelDiff(final[0], want); e > tol || slices.Equal(want[0], newPlain(t, whole, 7).p.Value(0)) {
				t.Errorf("DDP differs from one process on the whole batch by %g (relative), or nothing trained", e)
			}
		})
	}
}
