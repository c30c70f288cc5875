package combo_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/tests/testmodel"
	G "gorgonia.org/gorgonia"
)

// comboLR is the learning rate of every combination's plain SGD.
const comboLR = 0.5

// comboRank is one rank of a combination: its replica, and post-local
// SGD's model averager.
type comboRank struct {
	m   *testmodel.Branch
	avg *averaging.PeriodicModelAverager
}

// rankLog is what one rank did, for the checks after the run.
type rankLog struct {
	start   [][][]float64          // per step: the parameters before it
	stepped []map[string][]float64 // per step: the gradients solver.Step(d.ValueGrads()) steps
	runErr  []error                // per step: the synchronised RunAll's error (a NonFiniteError when poisoned)
	buckets [][][]int              // per step: the bucket plan the hook saw
	after   [][][]float64          // per step: the parameters after the optimizer step, before model averaging
	final   [][]float64            // at the end, after Finish under a Join
	err     error                  // what ended the run early
	errStep int                    // the step it ended in
}

// runCombo trains c on every rank and checks it. It returns the refusal
// the combination met, or "" when it trained.
func runCombo(t *testing.T, c *combo) (refused string) {
	ctx := testworld.Ctx(t)
	n := len(c.heads)
	refusal := c.refusal()
	gs := comboGroups(t, c.backend, n)
	ranks := make([]*comboRank, n)
	for r := range ranks { // a different start on every rank: Wrap gives all rank 0's
		ranks[r] = &comboRank{m: testmodel.NewBranchOf(t, c.heads[r], c.seed<<3|uint64(r), c.dt)}
	}
	initial := ranks[0].m.Values()
	errs := testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error { return ranks[r].setUp(ctx, t, c, g) })
	switch refusal {
	case "powersgd-start-iter":
		expectRefusal(t, refusal, errs, func(err error) bool { return errors.Is(err, commhook.ErrInvalidConfig) })
		return refusal
	case "mixed-precision":
		expectRefusal(t, refusal, errs, func(err error) bool {
			return err != nil &&
				strings.Contains(err.Error(), "MixedPrecision needs float16 or bfloat16 gradients, which Gorgonia cannot compute")
		})
		return refusal
	}
	testworld.NoErrors(t, errs)
	for r, k := range ranks { // one graph at a time: Gorgonia's graphs are not safe to build concurrently
		err := k.m.Build(t)
		if refusal != "unused-parameters" {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			continue
		}
		misses := c.heads[r] == testmodel.HeadFC2 || c.heads[r] == testmodel.HeadFC3
		if misses != (err != nil &&
			strings.Contains(err.Error(), "are not used in producing the loss; set Options.FindUnusedParameters")) {
			t.Fatalf("rank %d (head %s): Grad gave %v; want the refusal of unused parameters exactly where the graph misses "+
				"some", r, c.heads[r], err)
		}
	}
	if refusal == "unused-parameters" {
		return refusal
	}
	logs := make([]*rankLog, n)
	testworld.Parallel(n, func(r int) error { logs[r] = ranks[r].train(ctx, c, r); return nil })
	if refusal == "adasum-world-size" {
		expectRefusal(t, refusal, logErrs(logs), func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "Adasum needs a power-of-two number of ranks")
		})
		return refusal
	}
	checkCombo(t, c, initial, logs)
	return ""
}

func expectRefusal(t *testing.T, what string, errs []error, ok func(error) bool) {
	t.Helper()
	for r, err := range errs {
		if !ok(err) {
			t.Fatalf("rank %d: %v; want the documented refusal %q", r, err, what)
		}
	}
}

func logErrs(logs []*rankLog) []error {
	out := make([]error, len(logs))
	for r, l := range logs {
		out[r] = l.err
	}
	return out
}

// setUp makes rank's hook (and averager) and wraps its model. It is
// collective.
func (k *comboRank) setUp(ctx context.Context, t *testing.T, c *combo, g pg.ProcessGroup) error {
	o := c.opts
	if c.mixed {
		o.MixedPrecision = &reducer.MixedPrecision{ParamDtype: pg.Float16}
	}
	var err error
	switch c.hook {
	case "":
	case "user":
		o.Hook = commhook.HookFunc(sumThenDivide)
	case "powersgd":
		o.Hook, err = commhook.NewPowerSGD(c.psgd)
	case "batched-powersgd":
		o.Hook, err = commhook.NewBatchedPowerSGD(c.psgd)
	case "hierarchical":
		o.Hook, err = commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: c.perHost})
	case "post-localsgd":
		if o.Hook, err = commhook.NewPostLocalSGD(ctx, g, c.local); err == nil {
			k.avg, err = averaging.NewPeriodicModelAverager(g,
				averaging.PeriodicOptions{Period: c.period, WarmupSteps: c.local.StartLocalSGDIter})
		}
	default:
		o.Hook, err = commhook.ByName(c.hook, c.psgd)
	}
	if err != nil {
		return err
	}
	if cl, ok := o.Hook.(interface{ Close() error }); ok {
		t.Cleanup(func() { cl.Close() })
	}
	d, err := ddp.Wrap(ctx, g, k.m.Params, o)
	if err != nil {
		return err
	}
	t.Cleanup(func() { d.Close() })
	k.m.DDP = d
	return nil
}

// sumThenDivide is a comm hook of a user's: a SUM allreduce, then the
// division by the world size once it is done (torch's allreduce_hook
// divides first).
func sumThenDivide(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	w := g.AllReduce(ctx, b.Buffer, pg.Op(pg.Sum))
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		if err == nil {
			err = commhook.Divide(b.Buffer, g.Size())
		}
		f.Complete(err)
	}()
	return f
}

// train runs rank r's steps, the documented loop: under a Join, Step
// before each micro-batch and Finish at the end; micro−1 RunAllNoSync,
// then RunAll; solver.Step(d.ValueGrads()), skipped when the gradients
// are not finite; post-local SGD's model averaging after the step.
func (k *comboRank) train(ctx context.Context, c *combo, r int) *rankLog {
	m, d := k.m, k.m.DDP
	l := &rankLog{}
	fail := func(step int, err error) *rankLog {
		l.err, l.errStep = err, step
		return l
	}
	var j *reducer.Join
	if c.join != nil {
		var err error
		if j, err = d.NewJoin(*c.join); err != nil {
			return fail(0, err)
		}
	}
	s := G.NewVanillaSolver(G.WithLearnRate(comboLR))
	for step := range c.batches[r] {
		l.start = append(l.start, m.Values())
		var runErr error
		for micro := range c.micro {
			sync := micro == c.micro-1
			if j != nil {
				if err := j.Step(ctx, sync); err != nil {
					return fail(step, err)
				}
			}
			if err := c.feed(m, step, micro, r); err != nil {
				return fail(step, err)
			}
			if !sync {
				err := d.RunAllNoSync(ctx, m.VM)
				m.VM.Reset()
				if err != nil {
					return fail(step, err)
				}
				continue
			}
			if runErr = d.RunAll(ctx, m.VM); runErr != nil && !errors.Is(runErr, reducer.ErrNonFinite) {
				return fail(step, runErr)
			}
		}
		got, err := testmodel.SteppedGrads(d)
		if err != nil {
			return fail(step, err)
		}
		l.stepped, l.runErr = append(l.stepped, got), append(l.runErr, runErr)
		l.buckets = append(l.buckets, d.Reducer().Buckets())
		if runErr == nil {
			err = s.Step(d.ValueGrads())
		}
		m.VM.Reset()
		if err != nil {
			return fail(step, err)
		}
		l.after = append(l.after, m.Values())
		if k.avg != nil {
			values, err := d.ParamTensors()
			if err == nil {
				_, err = k.avg.AverageParameters(ctx, values)
			}
			if err != nil {
				return fail(step, err)
			}
		}
	}
	if j != nil {
		if err := j.Finish(ctx); err != nil {
			return fail(c.batches[r], err)
		}
	}
	l.final = m.Values()
	return l
}

// feed binds rank's micro-batch, with the combination's NaN if it is due.
func (c *combo) feed(m *testmodel.Branch, step, micro, rank int) error {
	if err := m.Feed(step*c.micro+micro, rank); err != nil {
		return err
	}
	if p := c.poison; p != nil && *p == (poisonAt{step, micro, rank}) {
		x := m.X.Value().Data()
		v := testmodel.Float64s(x)
		v[0] = math.NaN()
		testmodel.SetFloat64s(x, v)
	}
	return nil
}

// comboGroups starts n ranks of backend: "local", "tcp" (shared memory
// between the ranks, the default) or "tcp-noshm" (sockets only).
func comboGroups(t *testing.T, backend string, n int) []pg.ProcessGroup {
	t.Helper()
	if backend == "local" {
		return testworld.Groups(t, "local", n)
	}
	st := store.NewHashStore(store.HashStoreOptions{Timeout: testworld.Timeout})
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), testworld.Timeout)
	defer cancel()
	gs := make([]pg.ProcessGroup, n)
	errs := testworld.Parallel(n, func(r int) error {
		g, err := tcp.New(ctx, st, tcp.Options{Rank: r, Size: n, Secret: []byte("goddp-combo-test-secret-0123456789"),
			ListenAddr: "127.0.0.1:0", Timeout: testworld.Timeout, NoSharedMemory: backend == "tcp-noshm"})
		if err == nil {
			gs[r] = g
		}
		return err
	})
	t.Cleanup(func() { // a rank's Close says goodbye to the others: close them together
		var wg sync.WaitGroup
		for _, g := range gs {
			if g != nil {
				wg.Go(func() { g.Close() })
			}
		}
		wg.Wait()
	})
	testworld.NoErrors(t, errs)
	return gs
}
