package combo_test

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/tests/testmodel"
	"gorgonia.org/tensor"
)

// combo is one drawn combination: the world, the model on each rank, the
// options, the comm hook and the training schedule.
type combo struct {
	seed    uint64
	backend string // "local", "tcp" (shared memory between ranks), "tcp-noshm" (sockets only)
	dt      tensor.Dtype
	heads   []string // each rank's graph (testmodel.Branch's heads); some miss fc2 or fc3
	opts    ddp.Options
	micro   int   // micro-batches per optimizer step: micro−1 RunAllNoSync, then RunAll
	batches []int // optimizer steps per rank; uneven only under a Join
	join    *reducer.JoinOptions
	hook    string                   // one of comboHooks; "" is Options.Hook nil
	psgd    commhook.PowerSGDOptions // powersgd, batched-powersgd
	perHost int                      // hierarchical, post-localsgd: ranks per simulated host
	local   commhook.PostLocalSGDOptions
	period  int       // post-localsgd: the model averager's period
	poison  *poisonAt // with CheckFinite: a NaN in one rank's input
	mixed   bool      // Options.MixedPrecision, which Wrap refuses
	steps   int       // the most optimizer steps of any rank
	throwAt int       // under ThrowOnEarlyTermination with uneven inputs: the step no rank gets past; else -1
}

// poisonAt puts a NaN into rank's input at one micro-batch.
type poisonAt struct{ step, micro, rank int }

// comboHooks are the hooks drawn: "" (nil, the default allreduce), the
// built-in ones but noop, post-local SGD, and "user", sumThenDivide.
var comboHooks = []string{"", "allreduce", "fp16", "bf16", "powersgd", "batched-powersgd", "hierarchical", "adasum",
	"post-localsgd", "user"}

// comboHeads are the graphs a rank may build.
var comboHeads = []string{testmodel.HeadSum, testmodel.HeadSumX1, testmodel.HeadFC2, testmodel.HeadFC3,
	testmodel.HeadConcat, testmodel.HeadShared, testmodel.HeadTrunk}

// comboCaps are the bucket caps drawn, in bytes: 0 is the default (25 MiB,
// and 1 MiB for the first bucket), 8 puts every parameter in a bucket of
// its own.
var comboCaps = []int{0, 0, 8, 48, 128, 512}

// drawCombo draws the combination of seed.
func drawCombo(seed uint64) *combo {
	rng := rand.New(rand.NewPCG(seed, 22))
	n := pick(rng, 1, 2, 2, 3, 3, 4, 4, 4)
	c := &combo{seed: seed, backend: pick(rng, "local", "local", "tcp", "tcp-noshm"), dt: tensor.Float64, throwAt: -1}
	if rng.IntN(3) == 0 {
		c.dt = tensor.Float32
	}
	for range n {
		c.heads = append(c.heads, pick(rng, comboHeads...))
	}
	c.hook = pick(rng, comboHooks...)
	c.opts = ddp.Options{
		FindUnusedParameters: rng.IntN(2) == 0,
		StaticGraph:          rng.IntN(3) == 0,
		GradientAsBucketView: rng.IntN(3) == 0,
		BucketCapBytes:       pick(rng, comboCaps...),
		FirstBucketBytes:     pick(rng, comboCaps...),
		CheckFinite:          rng.IntN(3) == 0,
	}
	if rng.IntN(3) == 0 || c.hook == "post-localsgd" && rng.IntN(2) == 0 { // which the check sees diverge
		c.opts.CheckReplicasEvery = 1 + rng.IntN(3)
	}
	c.micro = 1
	if rng.IntN(2) == 0 {
		c.micro = 2 + rng.IntN(2)
	}
	c.steps = 3 + rng.IntN(3)
	c.batches = slices.Repeat([]int{c.steps}, n)
	switch c.hook {
	case "powersgd", "batched-powersgd":
		c.psgd = commhook.PowerSGDOptions{
			MatrixApproximationRank: 1 + rng.IntN(2),
			StartIter:               pick(rng, 0, 1, 2, 2, 2, 3, 3, 4), // 0 and 1 are refused with error feedback or warm start
			MinCompressionRate:      pick(rng, 0.0, 1, 2),
			UseErrorFeedback:        rng.IntN(4) != 0,
			WarmStart:               rng.IntN(4) != 0,
			RandomSeed:              rng.Uint64(),
		}
	case "hierarchical":
		c.perHost = 1 + rng.IntN(n)
	case "post-localsgd":
		c.perHost = 1 + rng.IntN(n)
		c.local = commhook.PostLocalSGDOptions{StartLocalSGDIter: rng.IntN(c.steps), RanksPerHost: c.perHost,
			NoPostLocalGradientAllreduce: rng.IntN(4) == 0}
		c.period = 1 + rng.IntN(3)
	}
	// Post-local SGD's model averager is a collective of its own that a
	// joined rank does not shadow (nor does torch's): no Join with it.
	if c.hook != "post-localsgd" && rng.IntN(3) == 0 {
		c.join = &reducer.JoinOptions{DivideByActiveRanks: rng.IntN(3) == 0, ThrowOnEarlyTermination: rng.IntN(8) == 0}
		for r := range c.batches {
			c.batches[r] = rng.IntN(c.steps + 1)
		}
		c.steps = slices.Max(c.batches)
		if c.join.ThrowOnEarlyTermination && slices.Min(c.batches) < c.steps {
			c.throwAt = slices.Min(c.batches)
		}
	}
	if c.opts.CheckFinite && poisonable(c.hook) && rng.IntN(2) == 0 {
		last := c.steps
		if c.throwAt >= 0 {
			last = c.throwAt
		}
		var ranks []int
		for r, b := range c.batches {
			if min(b, last) > 0 {
				ranks = append(ranks, r)
			}
		}
		if len(ranks) > 0 {
			r := ranks[rng.IntN(len(ranks))]
			c.poison = &poisonAt{step: rng.IntN(min(c.batches[r], last)), micro: rng.IntN(c.micro), rank: r}
		}
	}
	c.mixed = rng.IntN(40) == 0
	// Drawn last, so that every earlier seed draws what it always drew.
	c.opts.FindNonFiniteOrigin = rng.IntN(3) == 0
	return c
}

// poisonable: hooks that keep no state, so a NaN stays in its iteration,
// and average over every rank, so every rank sees it.
func poisonable(hook string) bool {
	switch hook {
	case "", "allreduce", "fp16", "bf16", "hierarchical", "user":
		return true
	}
	return false
}

func pick[T any](rng *rand.Rand, from ...T) T { return from[rng.IntN(len(from))] }

// refusal says which documented refusal the combination meets first, in
// the order the run meets them, or "" when it should train.
func (c *combo) refusal() string {
	psgd := c.hook == "powersgd" || c.hook == "batched-powersgd"
	missing := false
	for _, h := range c.heads {
		missing = missing || h == testmodel.HeadFC2 || h == testmodel.HeadFC3
	}
	switch {
	case psgd && c.psgd.StartIter <= 1 && (c.psgd.UseErrorFeedback || c.psgd.WarmStart):
		return "powersgd-start-iter" // NewPowerSGD: ErrInvalidConfig, as torch's ValueError
	case c.mixed:
		return "mixed-precision" // Wrap: Gorgonia has no float16 gradients
	case missing && !c.opts.FindUnusedParameters && !c.opts.StaticGraph:
		return "unused-parameters" // Grad: names them, asks for FindUnusedParameters
	case c.hook == "adasum" && bits.OnesCount(uint(len(c.heads))) != 1 && c.steps > 0 && c.throwAt != 0:
		return "adasum-world-size" // the first bucket (if any runs): a power-of-two world, as Horovod's
	}
	return ""
}

// features names what c drew besides its hook, for the tally.
func (c *combo) features() []string {
	o := c.opts
	f := []string{c.backend, fmt.Sprintf("%d ranks", len(c.heads)), c.dt.String()}
	for _, x := range []struct {
		on   bool
		name string
	}{
		{o.FindUnusedParameters, "unused"}, {o.StaticGraph, "static"}, {o.GradientAsBucketView, "view"},
		{o.BucketCapBytes > 0 || o.FirstBucketBytes > 0, "small buckets"}, {o.CheckReplicasEvery > 0, "replica check"},
		{o.CheckFinite, "finite"}, {o.FindNonFiniteOrigin, "origin"}, {c.micro > 1, "accumulation"}, {c.join != nil, "join"},
		{c.throwAt >= 0, "early termination"}, {c.poison != nil, "NaN"}, {c.divergesAt() >= 0, "divergence caught"},
	} {
		if x.on {
			f = append(f, x.name)
		}
	}
	return f
}

func (c *combo) hookName() string {
	if c.hook == "" {
		return "default"
	}
	return c.hook
}

func (c *combo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ranks, %s, %v, heads %s, hook %s", c.seed, len(c.heads), c.backend, c.dt,
		strings.Join(c.heads, "+"), c.hookName())
	switch c.hook {
	case "powersgd", "batched-powersgd":
		fmt.Fprintf(&b, " (rank %d, start %d, min rate %v, error feedback %v, warm start %v)", c.psgd.MatrixApproximationRank,
			c.psgd.StartIter, c.psgd.MinCompressionRate, c.psgd.UseErrorFeedback, c.psgd.WarmStart)
	case "hierarchical":
		fmt.Fprintf(&b, " (%d ranks per host)", c.perHost)
	case "post-localsgd":
		fmt.Fprintf(&b, " (start %d, %d ranks per host, no gradient allreduce %v, averaging period %d)",
			c.local.StartLocalSGDIter, c.perHost, c.local.NoPostLocalGradientAllreduce, c.period)
	}
	o := c.opts
	fmt.Fprintf(&b, "; unused %v, static %v, view %v, caps %d/%d, check replicas every %d, finite %v, origin %v; %d "+
		"micro-batches, steps %v",
		o.FindUnusedParameters, o.StaticGraph, o.GradientAsBucketView, o.BucketCapBytes, o.FirstBucketBytes,
		o.CheckReplicasEvery, o.CheckFinite, o.FindNonFiniteOrigin, c.micro, c.batches)
	if c.join != nil {
		fmt.Fprintf(&b, "; join (divide by active ranks %v, throw %v)", c.join.DivideByActiveRanks,
			c.join.ThrowOnEarlyTermination)
	}
	if c.poison != nil {
		fmt.Fprintf(&b, "; NaN at step %d, micro-batch %d, rank %d", c.poison.step, c.poison.micro, c.poison.rank)
	}
	if c.mixed {
		b.WriteString("; MixedPrecision")
	}
	return b.String()
}
