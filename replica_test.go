package ddp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
	"github.com/goddp/ddp/reducer"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The tests of this file hunt the ways replicas drift apart silently:
// two parameters whose gradients Gorgonia computes by the same
// expression, which it hash-conses into one node and so one memory, and
// parameters that a rank's graph does not reach. Each rank may build a
// different graph (a "head"), and after every RunAll the gradients that
// the documented loop steps (d.ValueGrads()) are compared with a plain
// reference: each rank's gradients computed by Gorgonia alone, averaged
// over ranks, with zeros where a rank's graph does not reach a parameter.
// They must also be bitwise equal across ranks, and so must the
// parameters after every step.

// The branch model: h = tanh(x·W1 + b1), then two heads of the same shape,
// fc2(h) = h·W2 + b2 and fc3(h) = h·W3 + b3, combined by the rank's head.
const (
	branchIn      = 6
	branchHidden  = 5
	branchClasses = 3
	branchRows    = 4
	branchSteps   = 4
)

// The heads a rank can build.
const (
	headSum    = "sum"    // fc2(h) + fc3(h): the gradients of W2/W3 and of b2/b3 are one node each
	headSumX1  = "sum×1"  // fc2(h) + fc3(h)·1: the same values, with no node in common
	headFC2    = "fc2"    // fc2(h): fc3 unused
	headFC3    = "fc3"    // fc3(h): fc2 unused
	headConcat = "concat" // rows of fc2(h) stacked on rows of fc3(h)
	headShared = "shared" // fc2(h) + fc3(h) + fc2(h)·fc3's shape again: W2 used twice
	headTrunk  = "trunk"  // fc2(tanh(x·W1+b1)) + fc3(tanh(x·W1+b1)) with the trunk built twice
)

// branchNames are the parameters, in order.
var branchNames = []string{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}

type branchModel struct {
	head   string
	dt     tensor.Dtype // tensor.Float64, or tensor.Float32
	g      *G.ExprGraph
	x, y   *G.Node
	params G.Nodes
	cost   *G.Node
	grads  G.Nodes
	vm     G.VM
	ddp    *DDP
}

func newBranchModel(t testing.TB, head string, seed uint64) *branchModel {
	return newBranchModelOf(t, head, seed, tensor.Float64)
}

// newBranchModelOf is newBranchModel in dtype dt. Its values, inputs and
// gradients go in and out as float64 (values, feed, localGrads), which
// holds float32 exactly.
func newBranchModelOf(t testing.TB, head string, seed uint64, dt tensor.Dtype) *branchModel {
	t.Helper()
	m := &branchModel{head: head, dt: dt, g: G.NewGraph()}
	rows := branchRows
	m.x = G.NewMatrix(m.g, dt, G.WithShape(rows, branchIn), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(rows, branchIn), tensor.Of(dt))))
	yRows := rows
	if head == headConcat {
		yRows = 2 * rows
	}
	m.y = G.NewMatrix(m.g, dt, G.WithShape(yRows, branchClasses), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(yRows, branchClasses), tensor.Of(dt))))
	shapes := [][2]int{{branchIn, branchHidden}, {1, branchHidden}, {branchHidden, branchClasses}, {1, branchClasses},
		{branchHidden, branchClasses}, {1, branchClasses}}
	for i, s := range shapes {
		v := uniform[float64](s[0]*s[1], seed, uint64(i), 0.7)
		m.params = append(m.params, G.NewMatrix(m.g, dt, G.WithShape(s[0], s[1]), G.WithName(branchNames[i]),
			G.WithValue(tensor.New(tensor.WithShape(s[0], s[1]), tensor.WithBacking(asDtype(dt, v))))))
	}
	return m
}

// asDtype is v as the backing of a tensor of dtype dt: v itself for
// float64, a rounded copy for float32.
func asDtype(dt tensor.Dtype, v []float64) any {
	if dt != tensor.Float32 {
		return v
	}
	out := make([]float32, len(v))
	for k, x := range v {
		out[k] = float32(x)
	}
	return out
}

// float64s copies a tensor's []float64 or []float32 data as float64.
func float64s(data any) []float64 {
	switch d := data.(type) {
	case []float64:
		return append([]float64(nil), d...)
	case []float32:
		out := make([]float64, len(d))
		for k, x := range d {
			out[k] = float64(x)
		}
		return out
	}
	panic(fmt.Sprintf("float64s: data of type %T", data))
}

// setFloat64s copies v into a tensor's []float64 or []float32 data.
func setFloat64s(data any, v []float64) {
	switch d := data.(type) {
	case []float64:
		copy(d, v)
	case []float32:
		for k := range d {
			d[k] = float32(v[k])
		}
	default:
		panic(fmt.Sprintf("setFloat64s: data of type %T", data))
	}
}

// build adds the forward graph of m's head, the loss and the backward
// graph. With a DDP wrapper the parameters are taken from d.Node.
func (m *branchModel) build(t testing.TB) error {
	t.Helper()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	param := func(i int) *G.Node { return m.params[i] }
	if m.ddp != nil {
		param = m.ddp.Node
	}
	trunk := func() *G.Node {
		z := must(G.Mul(m.x, param(0)))
		return must(G.Tanh(must(G.BroadcastAdd(z, param(1), nil, []byte{0}))))
	}
	h := trunk()
	fc := func(k int, in *G.Node) *G.Node { // k = 2 or 3
		z := must(G.Mul(in, param(2*k-2)))
		return must(G.BroadcastAdd(z, param(2*k-1), nil, []byte{0}))
	}
	var logits *G.Node
	switch m.head {
	case headSum:
		logits = must(G.Add(fc(2, h), fc(3, h)))
	case headSumX1:
		var one *G.Node
		if m.dt == tensor.Float32 {
			one = G.NewConstant(float32(1))
		} else {
			one = G.NewConstant(float64(1))
		}
		logits = must(G.Add(fc(2, h), must(G.Mul(fc(3, h), one))))
	case headFC2:
		logits = fc(2, h)
	case headFC3:
		logits = fc(3, h)
	case headConcat:
		logits = must(G.Concat(0, fc(2, h), fc(3, h)))
	case headShared:
		logits = must(G.Add(must(G.Add(fc(2, h), fc(3, h))), fc(2, h)))
	case headTrunk:
		logits = must(G.Add(fc(2, h), fc(3, trunk())))
	default:
		t.Fatalf("no head %q", m.head)
	}
	logp := must(G.LogSoftMax(logits))
	perRow := must(G.Sum(must(G.HadamardProd(m.y, logp)), 1))
	m.cost = must(G.Neg(must(G.Mean(perRow))))
	var err error
	if m.ddp != nil {
		m.grads, err = m.ddp.Grad(m.cost)
	} else {
		m.grads, _, err = autogradhooks.Grad(m.cost, m.params)
	}
	if err != nil {
		return err
	}
	m.vm = G.NewTapeMachine(m.g)
	t.Cleanup(func() { m.vm.Close() })
	return nil
}

// branchBatch is rank's batch at step: rows × inputs, and one-hot labels.
func branchBatch(step, rank int) (x, y []float64) {
	b := makeBatch[float64](mlpSpec{sizes: []int{branchIn, branchClasses}}, branchRows, uint64(1000*step+rank+1))
	y = make([]float64, branchRows*branchClasses)
	for r, c := range b.labels {
		y[r*branchClasses+c] = 1
	}
	return b.x, y
}

// feed binds rank's batch at step.
func (m *branchModel) feed(step, rank int) error {
	x, y := branchBatch(step, rank)
	if m.head == headConcat {
		y = append(y, y...)
	}
	yRows := len(y) / branchClasses
	if err := G.Let(m.x,
		tensor.New(tensor.WithShape(branchRows, branchIn), tensor.WithBacking(asDtype(m.dt, x)))); err != nil {
		return err
	}
	return G.Let(m.y, tensor.New(tensor.WithShape(yRows, branchClasses), tensor.WithBacking(asDtype(m.dt, y))))
}

func (m *branchModel) values() [][]float64 {
	out := make([][]float64, len(m.params))
	for i, p := range m.params {
		out[i] = float64s(p.Value().Data())
	}
	return out
}

func (m *branchModel) setValues(v [][]float64) {
	for i, p := range m.params {
		setFloat64s(p.Value().Data(), v[i])
	}
}

// localGrads runs the plain model once (its graph must be the rank's) at
// values and returns every parameter's gradient: zeros where the graph
// does not reach it.
func (m *branchModel) localGrads(values [][]float64, step, rank int) ([][]float64, error) {
	m.setValues(values)
	if err := m.feed(step, rank); err != nil {
		return nil, err
	}
	defer m.vm.Reset()
	if err := m.vm.RunAll(); err != nil {
		return nil, err
	}
	out := make([][]float64, len(m.params))
	for i, g := range m.grads {
		if g != nil {
			out[i] = float64s(g.Value().Data())
		} else {
			out[i] = make([]float64, len(values[i]))
		}
	}
	return out, nil
}

// steppedGrads copies the gradients the documented loop would step,
// solver.Step(d.ValueGrads()), keyed by parameter name.
func steppedGrads(d *DDP) (map[string][]float64, error) {
	out := map[string][]float64{}
	for _, vg := range d.ValueGrads() {
		n, ok := vg.(interface{ Name() string }) // a *G.Node or DDP's own
		if !ok {
			return nil, fmt.Errorf("ValueGrads gave a %T", vg)
		}
		g, err := vg.Grad()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name(), err)
		}
		out[n.Name()] = float64s(g.Data())
	}
	return out, nil
}

// branchCase is one run: the head each rank builds, the options and the
// comm hook (by name; "" is the default allreduce).
type branchCase struct {
	heads   []string
	opts    Options
	hook    string
	backend string            // "local" when empty
	groups  []pg.ProcessGroup // when set, the groups to run on instead
}

func (c branchCase) String() string {
	var mode []string
	if c.opts.FindUnusedParameters {
		mode = append(mode, "unused")
	}
	if c.opts.StaticGraph {
		mode = append(mode, "static")
	}
	if c.opts.GradientAsBucketView {
		mode = append(mode, "view")
	}
	if c.opts.BucketCapBytes > 0 {
		mode = append(mode, fmt.Sprintf("cap%d", c.opts.BucketCapBytes))
	}
	hook := c.hook
	if hook == "" {
		hook = "allreduce"
	}
	backend := c.backend
	if backend == "" {
		backend = "local"
	}
	return fmt.Sprintf("%s/%s/%s/%s", backend, strings.Join(c.heads, "+"), strings.Join(mode, ","), hook)
}

// branchRun trains c for branchSteps steps with plain SGD. After each
// RunAll it hands check the stepped gradients of every rank; after each
// step it checks that the parameters are bitwise equal across ranks. It
// returns the replicas.
func branchRun(t *testing.T, ctx context.Context, c branchCase,
	check func(step int, values [][][]float64, got []map[string][]float64)) []*branchModel {
	t.Helper()
	n := len(c.heads)
	backend := c.backend
	if backend == "" {
		backend = "local"
	}
	gs := c.groups
	if gs == nil {
		gs = branchGroups(t, backend, n)
	}
	replicas := make([]*branchModel, n)
	for r := range replicas {
		replicas[r] = newBranchModel(t, c.heads[r], uint64(7+r))
	}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		o := c.opts
		if c.hook != "" {
			h, err := commhook.ByName(c.hook, powerSGDForTests())
			if err != nil {
				return err
			}
			o.Hook = h
			if c, ok := h.(interface{ Close() error }); ok {
				t.Cleanup(func() { c.Close() })
			}
		}
		d, err := Wrap(ctx, g, replicas[r].params, o)
		if err == nil {
			t.Cleanup(func() { d.Close() }) // device buckets, before the groups close
		}
		replicas[r].ddp = d
		return err
	}))
	for _, m := range replicas {
		if err := m.build(t); err != nil {
			t.Fatal(err)
		}
	}
	solvers := make([]G.Solver, n)
	for r := range solvers {
		solvers[r] = G.NewVanillaSolver(G.WithLearnRate(0.5))
	}
	for step := range branchSteps {
		values := make([][][]float64, n)
		for r, m := range replicas {
			values[r] = m.values()
		}
		got := make([]map[string][]float64, n)
		noErrors(t, parallel(n, func(r int) error {
			m := replicas[r]
			if err := m.feed(step, r); err != nil {
				return err
			}
			if err := m.ddp.RunAll(ctx, m.vm); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			var err error
			got[r], err = steppedGrads(m.ddp)
			return err
		}))
		check(step, values, got)
		noErrors(t, parallel(n, func(r int) error {
			m := replicas[r]
			err := solvers[r].Step(m.ddp.ValueGrads())
			m.vm.Reset()
			return err
		}))
		for r := 1; r < n; r++ {
			if p, k := firstBitDiff(replicas[0].values(), replicas[r].values()); p >= 0 {
				t.Fatalf("after step %d, rank %d's %s[%d] differs from rank 0's: %v vs %v", step, r, branchNames[p], k,
					replicas[r].values()[p][k], replicas[0].values()[p][k])
			}
		}
	}
	return replicas
}

// branchGroups is groupsOf, plus "nccl-fake": pg/nccl over the NCCL
// binding's test double, whose buckets live in (pretend) device memory.
func branchGroups(t *testing.T, backend string, n int) []pg.ProcessGroup {
	t.Helper()
	if backend != "nccl-fake" {
		return groupsOf(t, backend, n)
	}
	fake, err := nccltest.NewWorld(n, nccltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	return fake.ProcessGroups()
}

// powerSGDForTests compresses from the first iteration, at rank 1.
func powerSGDForTests() commhook.PowerSGDOptions {
	o := commhook.DefaultPowerSGDOptions()
	o.MatrixApproximationRank, o.StartIter = 1, 2
	return o
}

// referenceGrads is the plain reference for one step: each rank's
// gradients by Gorgonia alone at that rank's values, summed in rank order
// and divided by the number of ranks.
func referenceGrads(t *testing.T, heads []string, values [][][]float64, step int, plain []*branchModel) [][]float64 {
	t.Helper()
	var sum [][]float64
	for r := range heads {
		g, err := plain[r].localGrads(values[r], step, r)
		if err != nil {
			t.Fatal(err)
		}
		if sum == nil {
			sum = g
			continue
		}
		for i := range sum {
			for k := range sum[i] {
				sum[i][k] += g[i][k]
			}
		}
	}
	for i := range sum {
		for k := range sum[i] {
			sum[i][k] /= float64(len(heads))
		}
	}
	return sum
}

func plainModels(t *testing.T, heads []string) []*branchModel {
	t.Helper()
	return plainModelsOf(t, heads, tensor.Float64)
}

// plainModelsOf is plainModels in dtype dt.
func plainModelsOf(t *testing.T, heads []string, dt tensor.Dtype) []*branchModel {
	t.Helper()
	out := make([]*branchModel, len(heads))
	for r, h := range heads {
		out[r] = newBranchModelOf(t, h, 0, dt)
		if err := out[r].build(t); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkStepped fails t unless every rank steps every parameter with want
// (within tol, relative to the parameter's largest element) and the ranks
// step bitwise the same.
func checkStepped(t *testing.T, step int, want [][]float64, got []map[string][]float64, tol float64) {
	t.Helper()
	for r, gr := range got {
		for i, name := range branchNames {
			g, ok := gr[name]
			if !ok {
				t.Fatalf("step %d: rank %d's documented loop, solver.Step(d.ValueGrads()), does not step %s (the average "+
					"gradient is %v)", step, r, name, short(want[i]))
			}
			if e := relErr([][]float64{g}, [][]float64{want[i]}); e > tol {
				t.Fatalf("step %d: rank %d steps %s with %v; the average of the ranks' own gradients is %v (relative error %.2g)",
					step, r, name, short(g), short(want[i]), e)
			}
			if r > 0 {
				if p, k := firstBitDiff([][]float64{g}, [][]float64{got[0][name]}); p >= 0 {
					t.Fatalf("step %d: rank %d steps %s[%d] with %v, rank 0 with %v", step, r, name, k, g[k], got[0][name][k])
				}
			}
		}
	}
}

func short(v []float64) string {
	if len(v) > 4 {
		return fmt.Sprintf("%.6g…", v[:4])
	}
	return fmt.Sprintf("%.6g", v)
}

// TestReplicasMatchPlainReference: every rank steps every parameter with
// the average of the ranks' own gradients, whichever graph each rank
// builds, in every mode that changes where gradients live or when they
// are reduced. It fails on two defects replicas can have: with "sum" the
// gradients of fc2 and fc3 are one memory (fc3's average written over
// fc2's), and a rank whose graph does not reach a parameter does not step
// it.
func TestReplicasMatchPlainReference(t *testing.T) {
	unused := Options{FindUnusedParameters: true}
	layouts := [][]string{
		{headSum, headFC2},
		{headFC3, headSum},
		{headSum, headFC2, headFC3},
		{headShared, headFC2},
		{headTrunk, headFC3},
		{headConcat, headFC2},
		{headSum, headSum},
	}
	var cases []branchCase
	for _, heads := range layouts {
		cases = append(cases,
			branchCase{heads: heads, opts: unused},
			branchCase{heads: heads, opts: Options{FindUnusedParameters: true, GradientAsBucketView: true}},
			branchCase{heads: heads, opts: Options{StaticGraph: true}},
			branchCase{heads: heads, opts: Options{FindUnusedParameters: true, BucketCapBytes: 8, FirstBucketBytes: 8}},
		)
	}
	cases = append(cases,
		branchCase{heads: []string{headSum, headSum}, opts: Options{}},
		branchCase{heads: []string{headSum, headSum}, opts: Options{GradientAsBucketView: true}},
		branchCase{heads: []string{headSum, headFC2}, opts: Options{StaticGraph: true, GradientAsBucketView: true}},
		branchCase{heads: []string{headSum, headFC2}, opts: unused, backend: "tcp"},
		branchCase{heads: []string{headSum, headFC2}, opts: Options{FindUnusedParameters: true, CheckReplicasEvery: 1},
			backend: "nccl-fake"},
		branchCase{heads: []string{headSum, headFC2}, opts: Options{StaticGraph: true}, backend: "nccl-fake"},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			ctx := testCtx(t)
			plain := plainModels(t, c.heads)
			branchRun(t, ctx, c, func(step int, values [][][]float64, got []map[string][]float64) {
				checkStepped(t, step, referenceGrads(t, c.heads, values, step, plain), got, 1e-12)
			})
		})
	}
}

// TestReplicasMatchTwinWithEveryHook: with each built-in hook, a run whose
// graph hash-conses the gradients of fc2 and fc3 ("sum") steps exactly as
// the same run on a graph that computes the same values without sharing a
// node ("sum×1"), bitwise, and the ranks agree bitwise. The hooks'
// results are not the plain average (fp16, PowerSGD), so the twin is the
// reference; with allreduce it is also checked against the average.
func TestReplicasMatchTwinWithEveryHook(t *testing.T) {
	for _, hook := range commhook.Names() {
		if hook == "noop" {
			continue // no communication: replicas diverge by design
		}
		for _, opts := range []Options{{FindUnusedParameters: true}, {StaticGraph: true},
			{FindUnusedParameters: true, GradientAsBucketView: true}} {
			c := branchCase{heads: []string{headSum, headFC2}, opts: opts, hook: hook}
			t.Run(c.String(), func(t *testing.T) {
				ctx := testCtx(t)
				var twin [][]map[string][]float64
				tc := c
				tc.heads = []string{headSumX1, headFC2}
				branchRun(t, ctx, tc, func(step int, _ [][][]float64, got []map[string][]float64) { twin = append(twin, got) })
				branchRun(t, ctx, c, func(step int, _ [][][]float64, got []map[string][]float64) {
					for r := range got {
						for _, name := range branchNames {
							g, ok := got[r][name]
							if !ok {
								t.Fatalf("step %d: rank %d does not step %s", step, r, name)
							}
							if p, k := firstBitDiff([][]float64{g}, [][]float64{twin[step][r][name]}); p >= 0 {
								t.Fatalf("step %d: rank %d steps %s[%d] with %v; the twin graph without shared nodes steps it with %v", step, r,
									name, k, g[k], twin[step][r][name][k])
							}
						}
					}
				})
			})
		}
	}
}

// TestSharedMemoryFoundAtRunTime: when parameter b's gradient is a view
// into a's (different nodes over one memory, which the structural check
// of Grad cannot see), the first run's probe gives b memory of its own,
// and each parameter gets its own average. Rank 1's b is separate memory,
// so the two averages differ. Gorgonia gave no such view in any graph
// tried (Reshape copies), so the hook is called directly.
func TestSharedMemoryFoundAtRunTime(t *testing.T) {
	ctx := testCtx(t)
	gs := groupsOf(t, "local", 2)
	ds := make([]*DDP, 2)
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		gr := G.NewGraph()
		a := G.NewMatrix(gr, tensor.Float64, G.WithShape(2, 3), G.WithName("a"), G.WithInit(G.Zeroes()))
		b := G.NewVector(gr, tensor.Float64, G.WithShape(3), G.WithName("b"), G.WithInit(G.Zeroes()))
		var err error
		ds[r], err = Wrap(ctx, g, G.Nodes{a, b}, Options{})
		return err
	}))
	for _, d := range ds { // one graph at a time
		sa, err := G.Sum(d.Node(0))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := G.Sum(d.Node(1))
		if err != nil {
			t.Fatal(err)
		}
		cost, err := G.Add(sa, sb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Grad(cost); err != nil {
			t.Fatal(err)
		}
	}
	ga := []*tensor.Dense{
		tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6})),
		tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{10, 20, 30, 40, 50, 60})),
	}
	gb := []*tensor.Dense{
		tensor.New(tensor.WithShape(3), tensor.WithBacking(ga[0].Float64s()[:3])), // a view into a's gradient
		tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{100, 200, 300})),
	}
	outB := make([]G.Value, 2)
	noErrors(t, parallel(2, func(r int) error {
		d := ds[r]
		d.probe, d.seen = true, nil
		if err := d.r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			return err
		}
		if out, err := d.hookGradient(0, ga[r]); err != nil || out != nil {
			return fmt.Errorf("a: %v, %v", out, err)
		}
		var err error
		if outB[r], err = d.hookGradient(1, gb[r]); err != nil {
			return err
		}
		return d.r.Finalize(ctx)
	}))
	if !ds[0].shared[1] || ds[1].shared[1] {
		t.Fatalf("shared b: rank 0 %v, rank 1 %v; want true, false", ds[0].shared[1], ds[1].shared[1])
	}
	wantA := []float64{5.5, 11, 16.5, 22, 27.5, 33}
	wantB := []float64{50.5, 101, 151.5}
	for r := range 2 {
		if got := ga[r].Float64s(); fmt.Sprint(got) != fmt.Sprint(wantA) {
			t.Errorf("rank %d: a's gradient is %v, want %v", r, got, wantA)
		}
		b := gb[r]
		if outB[r] != nil {
			b = outB[r].(*tensor.Dense)
		}
		if got := b.Float64s(); fmt.Sprint(got) != fmt.Sprint(wantB) {
			t.Errorf("rank %d: b's gradient is %v, want %v", r, got, wantB)
		}
	}
}

// TestReplicaCheckStopsDrift: with CheckReplicasEvery, a loop that steps
// only the parameters its own graph reaches (what a loop stepping only
// ValueGrads of reached nodes does) is caught on every rank at the next check, naming the
// first parameter that drifted (fc3.weight, which rank 1's graph does not
// reach) and the ranks.
func TestReplicaCheckStopsDrift(t *testing.T) {
	ctx := testCtx(t)
	heads := []string{headSum, headFC2}
	gs := groupsOf(t, "local", 2)
	ms := make([]*branchModel, 2)
	for r := range ms {
		ms[r] = newBranchModel(t, heads[r], 3)
	}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		var err error
		ms[r].ddp, err = Wrap(ctx, g, ms[r].params, Options{FindUnusedParameters: true, CheckReplicasEvery: 2})
		return err
	}))
	for _, m := range ms {
		if err := m.build(t); err != nil {
			t.Fatal(err)
		}
	}
	errs := parallel(2, func(r int) error {
		m := ms[r]
		s := G.NewVanillaSolver(G.WithLearnRate(0.5))
		for step := range 4 {
			if err := m.feed(step, r); err != nil {
				return err
			}
			if err := m.ddp.RunAll(ctx, m.vm); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			var local G.Nodes // the old loop: only what this rank's graph reaches
			for i, g := range m.grads {
				if g != nil {
					local = append(local, m.params[i])
				}
			}
			if err := s.Step(G.NodesToValueGrads(local)); err != nil {
				return err
			}
			m.vm.Reset()
		}
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, reducer.ErrReplicasDiverged) || !strings.Contains(err.Error(), "step 2:") ||
			!strings.Contains(err.Error(), "parameter 4 (fc3.weight)") || !strings.Contains(err.Error(), "ranks 1 hold") {
			t.Errorf("rank %d: %v; want ErrReplicasDiverged at step 2 naming fc3.weight and rank 1", r, err)
		}
	}
}

// TestJoinWithBranchHeads: uneven inputs (2 and 4 batches) under a Join,
// where rank 1's graph does not reach fc3, with the replica check on at
// every iteration (it stands aside while a rank has joined). The
// parameters follow torch's rule computed directly: at each iteration the
// active ranks' own gradients, zeros where a graph does not reach a
// parameter, summed and divided by the world size, one SGD step; both
// ranks end with the last joiner's parameters.
func TestJoinWithBranchHeads(t *testing.T) {
	ctx := testCtx(t)
	heads, batches := []string{headSum, headFC2}, []int{4, 2}
	const lr = 0.5
	gs := groupsOf(t, "tcp", 2)
	ms := make([]*branchModel, 2)
	for r := range ms {
		ms[r] = newBranchModel(t, heads[r], 11)
	}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		var err error
		ms[r].ddp, err = Wrap(ctx, g, ms[r].params, Options{FindUnusedParameters: true, CheckReplicasEvery: 1})
		return err
	}))
	for _, m := range ms {
		if err := m.build(t); err != nil {
			t.Fatal(err)
		}
	}
	start := ms[0].values()
	noErrors(t, parallel(2, func(r int) error {
		m := ms[r]
		j, err := m.ddp.NewJoin(reducer.JoinOptions{})
		if err != nil {
			return err
		}
		s := G.NewVanillaSolver(G.WithLearnRate(lr))
		for step := range batches[r] {
			if err := j.Step(ctx, true); err != nil {
				return err
			}
			if err := m.feed(step, r); err != nil {
				return err
			}
			if err := m.ddp.RunAll(ctx, m.vm); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if err := s.Step(m.ddp.ValueGrads()); err != nil {
				return err
			}
			m.vm.Reset()
		}
		return j.Finish(ctx)
	}))
	plain := plainModels(t, heads)
	w := start
	for step := range 4 {
		sum := make([][]float64, len(w))
		for i := range w {
			sum[i] = make([]float64, len(w[i]))
		}
		for r, b := range batches {
			if b <= step {
				continue
			}
			g, err := plain[r].localGrads(w, step, r)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g {
				for k := range g[i] {
					sum[i][k] += g[i][k]
				}
			}
		}
		for i := range w {
			for k := range w[i] {
				w[i][k] -= lr * (sum[i][k] / 2)
			}
		}
	}
	for r, m := range ms {
		got := m.values()
		if e := relErr(got, w); e > 1e-12 {
			p, k := firstBitDiff(got, w)
			t.Errorf("rank %d: relative error %.2g from torch's Join rule; first at %s[%d]: %v, want %v", r, e, branchNames[p],
				k, got[p][k], w[p][k])
		}
		if p, _ := firstBitDiff(got, ms[0].values()); p >= 0 {
			t.Errorf("rank %d's %s differs from rank 0's", r, branchNames[p])
		}
	}
}

// TestReplicasAccumulateWithBranchHeads: gradient accumulation (a no_sync
// micro-batch, then a synchronised one) where rank 0's gradients of fc2
// and fc3 share memory and rank 1's graph does not reach fc3. The stepped
// gradient is the average over ranks of each rank's sum over its two
// micro-batches, as torch's no_sync gives.
func TestReplicasAccumulateWithBranchHeads(t *testing.T) {
	heads := []string{headSum, headFC2}
	for _, opts := range []Options{{FindUnusedParameters: true},
		{FindUnusedParameters: true, GradientAsBucketView: true}} {
		t.Run(fmt.Sprintf("view=%v", opts.GradientAsBucketView), func(t *testing.T) {
			ctx := testCtx(t)
			gs := groupsOf(t, "local", 2)
			ms := make([]*branchModel, 2)
			for r := range ms {
				ms[r] = newBranchModel(t, heads[r], 5)
			}
			noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
				var err error
				ms[r].ddp, err = Wrap(ctx, g, ms[r].params, opts)
				return err
			}))
			for _, m := range ms {
				if err := m.build(t); err != nil {
					t.Fatal(err)
				}
			}
			plain := plainModels(t, heads)
			for step := range 3 {
				values := [][][]float64{ms[0].values(), ms[1].values()}
				want := make([][]float64, len(branchNames))
				for r := range 2 {
					for micro := range 2 {
						g, err := plain[r].localGrads(values[r], 2*step+micro, r)
						if err != nil {
							t.Fatal(err)
						}
						for i := range g {
							if want[i] == nil {
								want[i] = make([]float64, len(g[i]))
							}
							for k := range g[i] {
								want[i][k] += g[i][k] / 2
							}
						}
					}
				}
				got := make([]map[string][]float64, 2)
				noErrors(t, parallel(2, func(r int) error {
					m := ms[r]
					for micro := range 2 {
						if err := m.feed(2*step+micro, r); err != nil {
							return err
						}
						run := m.ddp.RunAllNoSync
						if micro == 1 {
							run = m.ddp.RunAll
						}
						if err := run(ctx, m.vm); err != nil {
							return err
						}
						if micro == 0 {
							m.vm.Reset()
						}
					}
					var err error
					got[r], err = steppedGrads(m.ddp)
					if err == nil {
						err = G.NewVanillaSolver(G.WithLearnRate(0.5)).Step(m.ddp.ValueGrads())
					}
					m.vm.Reset()
					return err
				}))
				checkStepped(t, step, want, got, 1e-12)
			}
		})
	}
}
