package ddp

import (
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chewxy/hm"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Overlap: the first bucket's allreduce starts while backward is still
// running, before the tape has even reached the first layer.
//
// Two witnesses that do not rely on the reducer's own bookkeeping:
//   - a probe op on each layer's pre-activation, whose gradient passes
//     through a node that logs "backward reached layer l" when the tape
//     computes it (for layer 1: before the gradients of fc1.weight and
//     fc1.bias exist);
//   - a VM wrapper that logs "tape done" when the machine's RunAll
//     returns, before DDP waits for the buckets.
//
// A comm hook registered on the reducer logs each bucket's launch and
// then runs the default allreduce.
func TestGorgoniaOverlap(t *testing.T) {
	const n, iterations = 2, 3
	ctx := testCtx(t)
	logs := make([]*eventLog, n)
	specs := make([]mlpSpec, n)
	for r := range n {
		logs[r] = &eventLog{}
		specs[r] = mlpSpec{sizes: mlpSizes(), rows: parityRows, probe: logs[r].probe}
	}
	// After the rebuild, buckets follow the ready order, last layer first:
	// {fc3.bias, fc3.weight}, {fc2.bias, fc2.weight}, {fc1.bias, fc1.weight}.
	opts := Options{BucketCapBytes: 512, FirstBucketBytes: 128}
	gs := groupsOf(t, "local", n)
	replicas := make([]*mlp[float64], n)
	for r := range replicas {
		replicas[r] = newMLP[float64](t, specs[r], referenceSeed)
	}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		if err := replicas[r].wrap(ctx, g, opts); err != nil {
			return err
		}
		return replicas[r].ddp.Reducer().RegisterCommHook(commhook.HookFunc(
			func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
				logs[r].add(fmt.Sprintf("launch bucket %d", b.Index))
				return commhook.Allreduce{}.Run(ctx, g, b)
			}))
	}))
	for _, m := range replicas {
		m.mustBuild(t)
	}

	buckets := make([]int, iterations) // rank 0's number of buckets in each iteration
	noErrors(t, parallel(n, func(r int) error {
		m, solver := replicas[r], newSolver("sgd")
		vm := tapeEnd{VM: m.vm, done: func() { logs[r].add("tape done") }}
		for it := range iterations {
			if err := m.feed(makeBatch[float64](m.spec, parityRows, uint64(10*it+r))); err != nil {
				return err
			}
			logs[r].add(fmt.Sprintf("iteration %d", it))
			if err := m.ddp.RunAll(ctx, vm); err != nil {
				return err
			}
			if r == 0 {
				buckets[it] = len(m.ddp.Reducer().Buckets())
			}
			if err := m.step(solver); err != nil {
				return err
			}
		}
		return nil
	}))

	for r, l := range logs {
		for it, events := range l.iterations() {
			t.Logf("rank %d iteration %d: %v", r, it, events)
			done := slices.Index(events, "tape done")
			first := slices.Index(events, "launch bucket 0")
			layer1 := slices.Index(events, "backward reached layer 1")
			if done < 0 || first < 0 || layer1 < 0 {
				t.Fatalf("rank %d iteration %d: events %v lack a launch, the probe or the tape's end", r, it, events)
			}
			for k, e := range events {
				if k > done && strings.HasPrefix(e, "launch") {
					t.Errorf("rank %d iteration %d: %q came after the tape finished: no overlap", r, it, e)
				}
			}
			if it == 0 {
				continue // one bucket, holding fc1's gradients too: it can only launch at the end of backward
			}
			if first > layer1 {
				t.Errorf("rank %d iteration %d: bucket 0 launched after backward reached layer 1 (%v): it should start as soon "+
					"as the last layer's gradients exist", r, it, events)
			}
		}
	}
	if buckets[0] != 1 {
		t.Errorf("the first iteration ran %d buckets; before the rebuild DDP uses one", buckets[0])
	}
	if buckets[1] < 3 {
		t.Errorf("after the rebuild there are %d buckets, want 3: the overlap test needs several", buckets[1])
	}
}

// eventLog records one rank's events in order: the probes and the comm
// hook log from the tape's goroutine, "tape done" and the iteration marks
// from the rank's.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// iterations splits the log at the "iteration k" marks.
func (l *eventLog) iterations() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]string
	for _, e := range l.events {
		if strings.HasPrefix(e, "iteration ") {
			out = append(out, nil)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], e)
		}
	}
	return out
}

// probe is an mlpSpec.probe: it wraps a layer's pre-activation in a
// backwardProbe that logs when backward reaches the layer.
func (l *eventLog) probe(layer int, z *G.Node) (*G.Node, error) {
	return G.ApplyOp(&backwardProbe{layer: layer, log: l}, z)
}

// tapeEnd is a VM that calls done when the machine's RunAll returns,
// before DDP's Finalize waits for the buckets.
type tapeEnd struct {
	G.VM
	done func()
}

func (v tapeEnd) RunAll() error {
	err := v.VM.RunAll()
	v.done()
	return err
}

// backwardProbe is an identity op. In the forward graph (backward false)
// it only plants, from its SymDiff, a backward twin on the incoming
// gradient; the twin (backward true) logs when the tape runs it. The
// backward walk reaches the forward probe before the layer's matmul, so
// the twin runs before the gradients of the layer's weight and bias are
// computed (see autogradhooks' Note [creation order]).
type backwardProbe struct {
	layer    int
	backward bool
	log      *eventLog
}

func (op *backwardProbe) Arity() int { return 1 }

func (op *backwardProbe) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *backwardProbe) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) == 1 {
		if s, ok := in[0].(tensor.Shape); ok {
			return s.Clone(), nil
		}
	}
	return nil, fmt.Errorf("%v: want one tensor.Shape, got %v", op, in)
}

func (op *backwardProbe) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%v: want 1 input, got %d", op, len(in))
	}
	if op.backward {
		op.log.add(fmt.Sprintf("backward reached layer %d", op.layer))
	}
	return in[0], nil
}

func (op *backwardProbe) ReturnsPtr() bool     { return true }
func (op *backwardProbe) CallsExtern() bool    { return false }
func (op *backwardProbe) OverwritesInput() int { return -1 }

func (op *backwardProbe) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "backwardProbe{%p,%d,%t}", op.log, op.layer, op.backward)
}

func (op *backwardProbe) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *backwardProbe) String() string {
	return fmt.Sprintf("backwardProbe{layer %d, backward %t}", op.layer, op.backward)
}

func (op *backwardProbe) DiffWRT(int) []bool { return []bool{true} }

func (op *backwardProbe) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.backward {
		return G.Nodes{grad}, nil
	}
	twin, err := G.ApplyOp(&backwardProbe{layer: op.layer, backward: true, log: op.log}, grad)
	return G.Nodes{twin}, err
}
