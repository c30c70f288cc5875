package main

// The contract with PyTorch: with the same initial weights, the
// same .npy data, --shuffle=false, plain SGD and float64, ddp-train must
// end with the parameters PyTorch DDP ends with.
//
// PyTorch cannot be installed where these tests run, so the PyTorch side
// is torchRef below: an independent float64 model of exactly what this
// script computes, written with explicit loops and sharing no code with
// goddp except package npy for reading and writing files:
//
//	model = nn.Sequential(nn.Linear(D, H1), nn.ReLU(), nn.Linear(H1, H2), nn.ReLU(), nn.Linear(H2, C)).double()
//	# load fcK.weight.npy ([in,out]) transposed into model[2K-2].weight ([out,in]), fcK.bias.npy as is
//	ddp = DDP(model)                                    # gloo; averages gradients: allreduce(grad / world)
//	sampler = DistributedSampler(ds, shuffle=False)     # pads by wrapping to a multiple of world; rank r takes r, r+W, …
//	loader = DataLoader(ds, batch_size=B, sampler=sampler)   # drop_last=False: the last batch may be short
//	opt = torch.optim.SGD(ddp.parameters(), lr=lr)      # p -= lr·g
//	loss_fn = nn.CrossEntropyLoss()                     # mean over the local batch
//	for epoch in range(E):
//	    sampler.set_epoch(epoch)
//	    for x, y in loader:
//	        opt.zero_grad(); loss_fn(ddp(x), y).backward(); opt.step()
//
// The mapping between the two layouts: nn.Linear keeps weight as
// [out_features, in_features] and computes x·Wᵀ + b; ddp-train keeps
// fcK.weight as [in, out] and computes x·W + b. torchRef works in
// PyTorch's layout and transposes when it reads or writes ddp-train's
// files.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/goddp/ddp/npy"
)

// torchLinear is one nn.Linear: weight [out, in] row-major, bias [out].
type torchLinear struct {
	in, out int
	weight  []float64
	bias    []float64
}

// torchRef is the PyTorch side of the contract: nn.Linear layers with
// ReLU between them, in float64.
type torchRef struct {
	layers []torchLinear
	opts   refOptions
}

// refOptions are deliberate departures from the contract. The zero value
// is PyTorch's semantics; the others exist only to show that the
// comparison notices each of them (TestContractWithPyTorch checks that
// every one of them makes the reference disagree with ddp-train).
type refOptions struct {
	samplerDropLast bool // DistributedSampler(drop_last=True): drop the tail instead of padding by wrapping
	blockShard      bool // rank r takes a contiguous block instead of r, r+W, …
	loaderDropLast  bool // DataLoader(drop_last=True): skip the short last batch
	sumLoss         bool // CrossEntropyLoss(reduction="sum") instead of the mean
	noWorldDivide   bool // gradients summed across ranks, not averaged
	noTranspose     bool // read [in,out] files as if they were [out,in]
}

// newTorchRef returns a zero model with layer widths sizes: D, H1, …, C.
func newTorchRef(sizes []int, opts refOptions) *torchRef {
	r := &torchRef{opts: opts}
	for k := 0; k+1 < len(sizes); k++ {
		in, out := sizes[k], sizes[k+1]
		r.layers = append(r.layers,
			torchLinear{in: in, out: out, weight: make([]float64, out*in), bias: make([]float64, out)})
	}
	return r
}

// loadOurs sets the layers from ddp-train's files: fcK.weight.npy is
// [in, out], the transpose of nn.Linear's weight.
func (r *torchRef) loadOurs(t *testing.T, dir string) {
	t.Helper()
	for k := range r.layers {
		l := &r.layers[k]
		w := readNPY(t, filepath.Join(dir, fmt.Sprintf("fc%d.weight.npy", k+1)), l.in, l.out)
		for i := range l.in {
			for o := range l.out {
				if r.opts.noTranspose {
					l.weight[o*l.in+i] = w[o*l.in+i]
				} else {
					l.weight[o*l.in+i] = w[i*l.out+o] // W_torch[o][i] = W_ours[i][o]
				}
			}
		}
		copy(l.bias, readNPY(t, filepath.Join(dir, fmt.Sprintf("fc%d.bias.npy", k+1)), l.out))
	}
}

// saveOurs writes the layers as ddp-train's files (weights transposed
// to [in, out]).
func (r *torchRef) saveOurs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, l := range r.layers {
		w := make([]float64, l.in*l.out)
		for o := range l.out {
			for i := range l.in {
				w[i*l.out+o] = l.weight[o*l.in+i]
			}
		}
		writeNPY(t, filepath.Join(dir, fmt.Sprintf("fc%d.weight.npy", k+1)), []int{l.in, l.out}, w)
		writeNPY(t, filepath.Join(dir, fmt.Sprintf("fc%d.bias.npy", k+1)), []int{l.out}, slices.Clone(l.bias))
	}
}

// grads are one gradient per parameter, in the layers' layout.
type grads struct{ w, b [][]float64 }

func (r *torchRef) zeroGrads() grads {
	var g grads
	for _, l := range r.layers {
		g.w = append(g.w, make([]float64, len(l.weight)))
		g.b = append(g.b, make([]float64, len(l.bias)))
	}
	return g
}

// lossGrad returns the gradient of CrossEntropyLoss() (mean over the
// batch) with respect to every parameter, for the rows idx of x, y.
func (r *torchRef) lossGrad(x [][]float64, y []int, idx []int) grads {
	g := r.zeroGrads()
	n := float64(len(idx))
	if r.opts.sumLoss {
		n = 1
	}
	L := len(r.layers)
	for _, row := range idx {
		// Forward: acts[k] is the input of layer k; pre[k] its output before ReLU.
		acts := [][]float64{x[row]}
		var pre [][]float64
		for k, l := range r.layers {
			a := acts[k]
			z := make([]float64, l.out)
			for o := range l.out {
				s := l.bias[o]
				for i := range l.in {
					s += l.weight[o*l.in+i] * a[i]
				}
				z[o] = s
			}
			pre = append(pre, z)
			if k < L-1 {
				h := make([]float64, l.out)
				for o, v := range z {
					h[o] = max(v, 0)
				}
				acts = append(acts, h)
			}
		}
		// d(loss)/d(logits) for this row: (softmax(z) − onehot(y)) / n.
		z := pre[L-1]
		m := slices.Max(z)
		var sum float64
		for _, v := range z {
			sum += math.Exp(v - m)
		}
		dz := make([]float64, len(z))
		for c, v := range z {
			p := math.Exp(v-m) / sum
			if c == y[row] {
				p -= 1
			}
			dz[c] = p / n
		}
		// Backward through the layers.
		for k := L - 1; k >= 0; k-- {
			l := r.layers[k]
			a := acts[k]
			for o := range l.out {
				g.b[k][o] += dz[o]
				for i := range l.in {
					g.w[k][o*l.in+i] += dz[o] * a[i]
				}
			}
			if k == 0 {
				break
			}
			da := make([]float64, l.in)
			for i := range l.in {
				var s float64
				for o := range l.out {
					s += l.weight[o*l.in+i] * dz[o]
				}
				if pre[k-1][i] > 0 { // ReLU's gradient
					da[i] = s
				}
			}
			dz = da
		}
	}
	return g
}

// torchSampler is DistributedSampler(shuffle=False).__iter__ for rank.
func torchSampler(n, world, rank int, o refOptions) []int {
	indices := make([]int, n)
	for i := range indices {
		indices[i] = i
	}
	var total int
	if o.samplerDropLast {
		total = n / world * world
		indices = indices[:total]
	} else {
		total = (n + world - 1) / world * world
		for len(indices) < total { // indices += indices[:padding_size], repeated if need be
			indices = append(indices, indices[:min(total-len(indices), n)]...)
		}
	}
	per := total / world
	if o.blockShard {
		return indices[rank*per : (rank+1)*per]
	}
	var mine []int
	for i := rank; i < total; i += world { // indices[rank:total_size:num_replicas]
		mine = append(mine, i)
	}
	for j, i := range mine {
		mine[j] = indices[i]
	}
	return mine
}

// torchLoader is DataLoader(batch_size=b) over a sampler's indices.
func torchLoader(indices []int, b int, o refOptions) [][]int {
	var out [][]int
	for start := 0; start < len(indices); start += b {
		end := min(start+b, len(indices))
		if o.loaderDropLast && end-start < b {
			break
		}
		out = append(out, indices[start:end])
	}
	return out
}

// train runs world DDP ranks for epochs epochs, or for steps steps if
// steps > 0, and returns the number of optimizer steps taken. The ranks
// hold identical replicas, so one copy of the parameters stands for all.
func (r *torchRef) train(x [][]float64, y []int, world, batch, epochs, steps int, lr float64) int {
	loaders := make([][][]int, world)
	for rank := range world {
		loaders[rank] = torchLoader(torchSampler(len(x), world, rank, r.opts), batch, r.opts)
	}
	done := 0
	for epoch := 0; steps > 0 || epoch < epochs; epoch++ {
		for s := range loaders[0] {
			if steps > 0 && done == steps {
				return done
			}
			// Each rank's local gradient, then DDP's allreduce(grad / world).
			avg := r.zeroGrads()
			for rank := range world {
				g := r.lossGrad(x, y, loaders[rank][s])
				div := float64(world)
				if r.opts.noWorldDivide {
					div = 1
				}
				for k := range avg.w {
					for j := range avg.w[k] {
						avg.w[k][j] += g.w[k][j] / div
					}
					for j := range avg.b[k] {
						avg.b[k][j] += g.b[k][j] / div
					}
				}
			}
			// SGD: p -= lr·g.
			for k := range r.layers {
				l := &r.layers[k]
				for j := range l.weight {
					l.weight[j] -= lr * avg.w[k][j]
				}
				for j := range l.bias {
					l.bias[j] -= lr * avg.b[k][j]
				}
			}
			done++
		}
	}
	return done
}

var doneStepsRE = regexp.MustCompile(`"msg":"done","rank":0,"steps":(\d+)`)

// doneSteps is the step count on rank 0's "done" line.
func doneSteps(stderr string) string {
	if m := doneStepsRE.FindStringSubmatch(stderr); m != nil {
		return m[1]
	}
	return "no"
}

func readNPY(t *testing.T, path string, shape ...int) []float64 {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Shape, shape) || a.Descr != "<f8" {
		t.Fatalf("%s: shape %v dtype %s, want %v <f8", path, a.Shape, a.Descr, shape)
	}
	v, err := a.Float64s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func writeNPY(t *testing.T, path string, shape []int, data any) {
	t.Helper()
	if err := npy.WriteFile(path, shape, data); err != nil {
		t.Fatal(err)
	}
}

// contractData writes X.npy [n,d] float64 and y.npy [n] int64 (labels the
// argmax of a fixed linear map, so every class occurs) and returns them.
func contractData(t *testing.T, dir string, n, d, classes int) ([][]float64, []int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(2024, 4))
	v := make([]float64, d*classes)
	for k := range v {
		v[k] = rng.NormFloat64()
	}
	flat := make([]float64, n*d)
	x := make([][]float64, n)
	y := make([]int, n)
	y64 := make([]int64, n)
	seen := map[int]bool{}
	for i := range n {
		x[i] = flat[i*d : (i+1)*d]
		for j := range x[i] {
			x[i][j] = rng.NormFloat64()
		}
		best, bestScore := 0, math.Inf(-1)
		for c := range classes {
			var s float64
			for j := range d {
				s += x[i][j] * v[j*classes+c]
			}
			if s > bestScore {
				best, bestScore = c, s
			}
		}
		y[i], y64[i] = best, int64(best)
		seen[best] = true
	}
	if len(seen) != classes {
		t.Fatalf("the generated labels cover %d of %d classes", len(seen), classes)
	}
	writeNPY(t, filepath.Join(dir, "X.npy"), []int{n, d}, flat)
	writeNPY(t, filepath.Join(dir, "y.npy"), []int{n}, y64)
	return x, y
}

// contractInit returns a model with nn.Linear's default initialisation
// (uniform in ±1/√in), drawn from a fixed stream unrelated to goddp's.
func contractInit(sizes []int) *torchRef {
	r := newTorchRef(sizes, refOptions{})
	rng := rand.New(rand.NewPCG(7, 11))
	for k := range r.layers {
		l := &r.layers[k]
		bound := 1 / math.Sqrt(float64(l.in))
		for j := range l.weight {
			l.weight[j] = bound * (2*rng.Float64() - 1)
		}
		for j := range l.bias {
			l.bias[j] = bound * (2*rng.Float64() - 1)
		}
	}
	return r
}

// paramDiff compares two models: the largest normwise relative error
// max|a−b| / max|b| over the parameter tensors, and the largest
// elementwise |a−b| / max(|a|,|b|).
func paramDiff(a, b *torchRef) (normwise, elementwise float64) {
	cmp := func(x, y []float64) {
		var num, den float64
		for j := range x {
			d := math.Abs(x[j] - y[j])
			num, den = max(num, d), max(den, math.Abs(y[j]))
			if s := max(math.Abs(x[j]), math.Abs(y[j])); s > 0 {
				elementwise = max(elementwise, d/s)
			}
		}
		if den > 0 {
			normwise = max(normwise, num/den)
		}
	}
	for k := range a.layers {
		cmp(a.layers[k].weight, b.layers[k].weight)
		cmp(a.layers[k].bias, b.layers[k].bias)
	}
	return normwise, elementwise
}

// The contract's data: N is a multiple of neither 2 nor 3, so ranks pad by
// wrapping; each rank's last batch is short (N=49, B=8: with 1 worker
// 6×8+1, with 2 workers 25 = 3×8+1, with 3 workers 17 = 2×8+1).
const (
	contractN       = 49
	contractD       = 6
	contractClasses = 3
	contractBatch   = 8
	contractLR      = 0.1
	contractTol     = 1e-12
)

var contractHidden = []int{10, 7}

func TestContractWithPyTorch(t *testing.T) {
	dir := t.TempDir()
	x, y := contractData(t, dir, contractN, contractD, contractClasses)
	sizes := append(append([]int{contractD}, contractHidden...), contractClasses)
	initDir := filepath.Join(dir, "init")
	initial := contractInit(sizes)
	initial.saveOurs(t, initDir)

	hidden := ""
	for k, h := range contractHidden {
		if k > 0 {
			hidden += ","
		}
		hidden += strconv.Itoa(h)
	}
	cases := []struct {
		name          string
		backend       string
		world         int
		epochs, steps int
	}{
		{"tcp/nproc=2/epochs=2", "tcp", 2, 2, 0},
		{"tcp/nproc=1/epochs=2", "tcp", 1, 2, 0},
		{"local/nproc=1/epochs=2", "local", 1, 2, 0},
		{"local/nproc=3/epochs=2", "local", 3, 2, 0},
		{"tcp/nproc=3/epochs=2", "tcp", 3, 2, 0},
		{"tcp/nproc=2/steps=6", "tcp", 2, 0, 6}, // stops inside the second epoch
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := ddpTrain(t,
				"--nproc", strconv.Itoa(c.world), "--backend", c.backend,
				"--data", filepath.Join(dir, "X.npy"), "--labels", filepath.Join(dir, "y.npy"),
				"--init", initDir, "--save", out,
				"--model", "mlp", "--hidden", hidden, "--activation", "relu",
				"--dtype", "float64", "--optimizer", "sgd", "--lr", strconv.FormatFloat(contractLR, 'g', -1, 64),
				"--shuffle=false", "--batch-size", strconv.Itoa(contractBatch),
				"--epochs", strconv.Itoa(c.epochs), "--steps", strconv.Itoa(c.steps),
				"--log-format", "json", "--timeout", "30s")
			if r.code != 0 {
				t.Fatalf("ddp-train exited %d\n%s", r.code, r.stderr)
			}
			got := newTorchRef(sizes, refOptions{})
			got.loadOurs(t, out)

			reference := func(o refOptions) (*torchRef, int) {
				ref := newTorchRef(sizes, o)
				ref.loadOurs(t, initDir)
				n := ref.train(x, y, c.world, contractBatch, c.epochs, c.steps, contractLR)
				return ref, n
			}
			want, steps := reference(refOptions{})
			if m := doneSteps(r.stderr); m != strconv.Itoa(steps) {
				t.Fatalf("ddp-train ran %s steps, PyTorch's loop %d\n%s", m, steps, r.stderr)
			}
			normwise, elementwise := paramDiff(got, want)
			moved, _ := paramDiff(initial, want)
			t.Logf("%d steps: max relative difference from the reference %.3g normwise, %.3g elementwise (training moved the "+
				"parameters by %.3g)",
				steps, normwise, elementwise, moved)
			if normwise > contractTol || elementwise > contractTol {
				t.Errorf("ddp-train's parameters differ from PyTorch's: relative difference %.3g normwise, %.3g elementwise; "+
					"want ≤ %g",
					normwise, elementwise, contractTol)
			}
			if moved < 1e-3 {
				t.Errorf("training moved the parameters by only %.3g: the comparison proves little", moved)
			}

			// Each departure from PyTorch's semantics must be caught: the
			// comparison is sensitive to padding, sharding, short batches,
			// the mean, the averaging and the layout.
			mutations := []struct {
				name     string
				o        refOptions
				minWorld int
			}{
				{"sampler drop_last", refOptions{samplerDropLast: true}, 2},
				{"contiguous shards", refOptions{blockShard: true}, 2},
				{"loader drop_last", refOptions{loaderDropLast: true}, 1},
				{"sum loss", refOptions{sumLoss: true}, 1},
				{"gradients summed across ranks", refOptions{noWorldDivide: true}, 2},
				{"weights not transposed", refOptions{noTranspose: true}, 1},
			}
			for _, m := range mutations {
				if c.world < m.minWorld {
					continue
				}
				bad, _ := reference(m.o)
				d, _ := paramDiff(got, bad)
				t.Logf("  a reference with %s differs by %.3g", m.name, d)
				if d <= 1e3*contractTol {
					t.Errorf("a reference with %s agrees with ddp-train (relative difference %.3g): the test cannot tell", m.name, d)
				}
			}
		})
	}
}
