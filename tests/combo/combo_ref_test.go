package combo_test

import (
	"math"

	"github.com/goddp/ddp/tests/testmodel"
	"gorgonia.org/tensor"
)

// The references of TestCombinations: what every rank must step at one
// synchronised iteration, given what each rank put into the buckets.
// They are computed in float64, directly from the definitions, and share
// no code with the hooks:
//
//   - allreduce (the default, nil, hierarchical, the user's hook): the sum
//     over ranks divided by the world size (by the ranks still training
//     under a Join that divides by them, for the default allreduce only,
//     as in torch). Exact up to the order of the sums.
//   - fp16, bf16: the same average, within the roundings of the cast, the
//     division and each partial sum: (n+1) units in the last place of the
//     largest contribution, and float16's subnormal spacing.
//   - adasum: Horovod's pairwise rule applied as a binary tree, per
//     parameter.
//   - powersgd, batched-powersgd: torch's PowerSGD run serially: error
//     feedback, warm start and the random start on each rank, the power
//     step on the sums (the plain average before StartIter).
//   - post-localsgd: the average over all ranks before StartLocalSGDIter;
//     then over the rank's simulated host, or the rank's own gradient.
//
// A parameter that no rank's graph reaches gets zeros, whatever the hook
// made of its bucket (DDP leaves it untouched, as torch leaves its grad):
// not while some rank has joined, since a joined rank shadows with every
// parameter marked ready.

// stepWant is what every rank must step at one iteration.
type stepWant struct {
	want  [][][]float64 // [rank][param]
	scale [][]float64   // [rank][param]: what the error is measured against
	tol   float64       // the error allowed, relative to scale
	abs   float64       // absolute slack per element
	group []int         // per rank: ranks of one group step bitwise the same gradients
}

// comboRef computes stepWants, keeping the state of a stateful hook.
type comboRef struct {
	c     *combo
	reach [][]bool // per rank, per parameter: the rank's graph reaches it
	power *powerRef
}

func newComboRef(c *combo, plain []*testmodel.Branch) *comboRef {
	ref := &comboRef{c: c}
	for _, m := range plain {
		reach := make([]bool, len(m.Grads))
		for i, g := range m.Grads {
			reach[i] = g != nil
		}
		ref.reach = append(ref.reach, reach)
	}
	if c.hook == "powersgd" || c.hook == "batched-powersgd" {
		ref.power = &powerRef{o: c.psgd, batched: c.hook == "batched-powersgd", n: len(c.heads),
			errs: make([]map[string][]float64, len(c.heads)), qs: map[string][]float64{}}
		for r := range ref.power.errs {
			ref.power.errs[r] = map[string][]float64{}
		}
		for _, p := range plain[0].Params {
			ref.power.shapes = append(ref.power.shapes, p.Shape().Clone())
		}
	}
	return ref
}

// expect returns what each rank must step at step, given g[r][i], what
// rank r put into parameter i's bucket (zeros if it did not train), and
// the bucket plan.
func (ref *comboRef) expect(step int, g [][][]float64, contrib []bool, plan [][]int) *stepWant {
	c, n := ref.c, len(g)
	w := &stepWant{tol: exactTol(c.dt), group: make([]int, n), want: make([][][]float64, n), scale: make([][]float64, n)}
	all := make([]int, n)
	for r := range all {
		all[r] = r
	}
	active := 0
	for _, a := range contrib {
		if a {
			active++
		}
	}
	var out [][]float64
	var scale []float64
	switch c.hook {
	case "", "allreduce":
		div := n
		if c.join != nil && c.join.DivideByActiveRanks {
			div = active
		}
		out, scale = meanOf(g, all, div)
	case "hierarchical", "user":
		out, scale = meanOf(g, all, n)
	case "fp16", "bf16":
		out, scale = meanOf(g, all, n)
		ulp := math.Ldexp(1, -11) // float16: 10 bits after the point, rounding to nearest
		if c.hook == "bf16" {
			ulp = math.Ldexp(1, -8)
		}
		w.tol, w.abs = float64(n+1)*ulp, float64(n+1)*math.Ldexp(1, -24)
	case "adasum":
		out, scale = adasumOf(g)
		w.tol = 1e-10
		if c.dt == tensor.Float32 {
			w.tol = 1e-5
		}
	case "powersgd", "batched-powersgd":
		out, scale = ref.power.step(step, g, plan)
		w.tol = 1e-9
		if c.dt == tensor.Float32 {
			w.tol = 1e-4
		}
	case "post-localsgd":
		for r := range n {
			var members []int
			for m := range n {
				if c.gradGroup(step, m) == c.gradGroup(step, r) {
					members = append(members, m)
				}
			}
			w.want[r], w.scale[r] = meanOf(g, members, len(members))
			w.group[r] = c.gradGroup(step, r)
		}
	}
	for r := range n {
		if out != nil {
			w.want[r], w.scale[r] = out, scale
		}
	}
	if (c.opts.FindUnusedParameters || c.opts.StaticGraph) && active == n {
		for i := range g[0] {
			if !ref.reached(i) {
				for r := range n {
					w.want[r] = append([][]float64(nil), w.want[r]...)
					w.want[r][i] = make([]float64, len(g[0][i]))
				}
			}
		}
	}
	return w
}

// reached reports whether some rank's graph reaches parameter i.
func (ref *comboRef) reached(i int) bool {
	for _, reach := range ref.reach {
		if reach[i] {
			return true
		}
	}
	return false
}

// meanOf is the sum over members of g[r][i], divided by div, and the
// largest magnitude among the result and the contributions.
func meanOf(g [][][]float64, members []int, div int) (out [][]float64, scale []float64) {
	out, scale = make([][]float64, len(g[0])), make([]float64, len(g[0]))
	for i := range out {
		out[i] = make([]float64, len(g[0][i]))
		for _, r := range members {
			for k, x := range g[r][i] {
				out[i][k] += x
			}
			scale[i] = max(scale[i], maxAbs(g[r][i]))
		}
		for k := range out[i] {
			out[i][k] /= float64(div)
		}
		scale[i] = max(scale[i], maxAbs(out[i]))
	}
	return out, scale
}

// adasumOf is Horovod's Adasum of every rank's gradient, per parameter:
// Adasum(a, b) = (1 − a·b/(2‖a‖²))·a + (1 − a·b/(2‖b‖²))·b, a coefficient
// 1 where the squared norm is below 1e-8, applied as a binary tree (ranks
// 2i and 2i+1, then pairs of pairs).
func adasumOf(g [][][]float64) (out [][]float64, scale []float64) {
	n := len(g)
	out, scale = make([][]float64, len(g[0])), make([]float64, len(g[0]))
	for i := range out {
		cur := make([][]float64, n)
		for r := range cur {
			cur[r] = append([]float64(nil), g[r][i]...)
			scale[i] = max(scale[i], maxAbs(g[r][i]))
		}
		for level := 1; level < n; level <<= 1 {
			for lo := 0; lo+level < n; lo += 2 * level {
				a, b := cur[lo], cur[lo+level]
				var dot, an, bn float64
				for k := range a {
					dot, an, bn = dot+a[k]*b[k], an+a[k]*a[k], bn+b[k]*b[k]
				}
				ca, cb := 1.0, 1.0
				if an >= 1e-8 {
					ca = 1 - dot/an*0.5
				}
				if bn >= 1e-8 {
					cb = 1 - dot/bn*0.5
				}
				for k := range a {
					a[k] = ca*a[k] + cb*b[k]
				}
			}
		}
		out[i] = cur[0]
		scale[i] = max(scale[i], maxAbs(out[i]))
	}
	return out, scale
}

// Post-local SGD's schedule.

// gradGroup is the group rank r's gradients are averaged in at step:
// everyone before StartLocalSGDIter; then its simulated host, or itself
// alone without the gradient allreduce.
func (c *combo) gradGroup(step, r int) int {
	switch {
	case c.hook != "post-localsgd" || step < c.local.StartLocalSGDIter:
		return 0
	case c.local.NoPostLocalGradientAllreduce:
		return r
	}
	return r / c.perHost
}

// averaged reports whether the model averager averages after step
// (torch's PeriodicModelAverager, warm-up = StartLocalSGDIter).
func (c *combo) averaged(step int) bool {
	s := c.local.StartLocalSGDIter
	return c.hook == "post-localsgd" && step >= s && (step-s)%c.period == 0
}

// allEqual reports whether every rank holds the same parameters before
// step (at the end, for step = c.steps).
func (c *combo) allEqual(step int) bool {
	eq := true
	for s := range step {
		same := true
		for r := range c.heads {
			same = same && c.gradGroup(s, r) == c.gradGroup(s, 0)
		}
		eq = c.averaged(s) || eq && same
	}
	return eq
}

// valueGroup is the group of ranks that hold bitwise the same parameters
// as rank r before step: every rank, but after post-local SGD's switch
// and before its next averaging, the rank's host (or the rank alone).
func (c *combo) valueGroup(step, r int) int {
	if c.allEqual(step) {
		return 0
	}
	return c.gradGroup(c.local.StartLocalSGDIter, r)
}

// divergesAt is the step whose replica check (CheckReplicasEvery) finds
// the replicas different, by post-local SGD's design; −1 if none does.
// RunAll checks before every every-th synchronised iteration.
func (c *combo) divergesAt() int {
	every := c.opts.CheckReplicasEvery
	for s := 1; every > 0 && s < c.steps; s++ {
		if s%every == 0 && !c.allEqual(s) {
			return s
		}
	}
	return -1
}
