package optim

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goddp/ddp/pg"
)

// clipCase is one call of clip_grad_norm_ or clip_grad_value_, in
// testdata/clip_torch.py's format: every float as its float64 bits.
type clipCase struct {
	Name      string     `json:"name"`
	Dtypes    []string   `json:"dtypes"`
	Shapes    [][]int    `json:"shapes"`
	Grads     [][]uint64 `json:"grads"` // nil: the parameter has no gradient
	Kind      string     `json:"kind"`  // "norm" or "value"
	MaxNorm   uint64     `json:"max_norm"`
	NormType  uint64     `json:"norm_type"`
	ClipValue uint64     `json:"clip_value"`
}

type clipResult struct {
	TotalNorm *uint64    `json:"total_norm"`
	Grads     [][]uint64 `json:"grads"`
}

// clipShapes are parameter shapes whose sizes cover the float32 kernel's
// cases: a multiple of 8, remainders below and above 4, and one element.
var clipShapes = [][]int{{7, 5}, {5}, {3, 4, 2}, {1}, {130}, {13}, {4}, {2, 3}}

// clipGrads draws one gradient per shape, each at its own scale (1e-3 to
// 3e2), rounded to its dtype.
func clipGrads(rng *rand.Rand, dtypes []pg.Dtype, shapes [][]int) [][]float64 {
	scales := []float64{1, 1e-3, 0.1, 30, 300, 2, 0.5, 7}
	out := make([][]float64, len(shapes))
	for i, sh := range shapes {
		n := 1
		for _, d := range sh {
			n *= d
		}
		out[i] = make([]float64, n)
		for k := range out[i] {
			v := rng.NormFloat64() * scales[i%len(scales)]
			if dtypes[i] == pg.Float32 {
				v = float64(float32(v))
			}
			out[i][k] = v
		}
	}
	return out
}

func dtypeName(d pg.Dtype) string {
	if d == pg.Float32 {
		return "float32"
	}
	return "float64"
}

// goClip runs the case through ClipGradNorm or ClipGradValue and returns
// what torch returns.
func goClip(c clipCase, vals [][]float64, dtypes []pg.Dtype) (clipResult, error) {
	grads := make([]pg.Tensor, len(vals))
	for i, v := range vals {
		if v != nil {
			grads[i] = convert(pg.Float64s(append([]float64(nil), v...)), dtypes[i])
		}
	}
	var res clipResult
	if c.Kind == "norm" {
		total, err := ClipGradNorm(grads, math.Float64frombits(c.MaxNorm), math.Float64frombits(c.NormType))
		if err != nil {
			return res, err
		}
		b := math.Float64bits(total)
		res.TotalNorm = &b
	} else if err := ClipGradValue(grads, math.Float64frombits(c.ClipValue)); err != nil {
		return res, err
	}
	res.Grads = make([][]uint64, len(grads))
	for i, g := range grads {
		if g.Data != nil {
			res.Grads[i] = toBits(toFloat64s(g))
		}
	}
	return res, nil
}

func toBits(v []float64) []uint64 {
	out := make([]uint64, len(v))
	for k, x := range v {
		out[k] = math.Float64bits(x)
	}
	return out
}

// clipCases builds the cases: for each dtype and norm type, a max norm
// that bites (0.3 of the total), one that does not (3 times) and +Inf;
// a gradient that is None, mixed dtypes, one gradient of 40000 values;
// and clip_grad_value_ with NaN, infinities and a negative zero among the
// values.
func clipCases(t *testing.T) ([]clipCase, [][][]float64, [][]pg.Dtype) {
	rng := rand.New(rand.NewPCG(36, 1))
	var cases []clipCase
	var vals [][][]float64
	var dts [][]pg.Dtype
	add := func(c clipCase, v [][]float64, d []pg.Dtype) {
		c.Shapes, c.Dtypes, c.Grads = make([][]int, len(v)), make([]string, len(v)), make([][]uint64, len(v))
		for i := range v {
			c.Shapes[i], c.Dtypes[i] = []int{len(v[i])}, dtypeName(d[i])
			if v[i] == nil {
				c.Shapes[i] = []int{3}
			} else {
				c.Grads[i] = toBits(v[i])
			}
		}
		cases, vals, dts = append(cases, c), append(vals, v), append(dts, d)
	}
	for _, dt := range []pg.Dtype{pg.Float32, pg.Float64} {
		same := func(n int) []pg.Dtype {
			d := make([]pg.Dtype, n)
			for i := range d {
				d[i] = dt
			}
			return d
		}
		for _, p := range []float64{2, 1, math.Inf(1), 3} {
			for _, f := range []float64{0.3, 3, math.Inf(1)} {
				d := same(len(clipShapes))
				v := clipGrads(rng, d, clipShapes)
				total, err := TotalNorm(tensorsOf(v, d), p)
				if err != nil {
					t.Fatal(err)
				}
				add(clipCase{Name: fmt.Sprintf("%v p=%v max=%v×total", dt, p, f), Kind: "norm",
					MaxNorm: math.Float64bits(f * total), NormType: math.Float64bits(p)}, v, d)
			}
		}
		d := same(len(clipShapes))
		v := clipGrads(rng, d, clipShapes)
		v[2] = nil
		add(clipCase{Name: fmt.Sprintf("%v one gradient None", dt), Kind: "norm", MaxNorm: math.Float64bits(1),
			NormType: math.Float64bits(2)}, v, d)
		for _, p := range []float64{2, 1} {
			big := clipGrads(rng, same(2), [][]int{{200, 200}, {9}})
			add(clipCase{Name: fmt.Sprintf("%v 40000 values p=%v", dt, p), Kind: "norm", MaxNorm: math.Float64bits(1),
				NormType: math.Float64bits(p)}, big, same(2))
		}
		for _, cv := range []float64{0.05, 1, 0} {
			v := clipGrads(rng, d, clipShapes)
			v[0][0], v[0][1], v[0][2], v[0][3] = math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)
			add(clipCase{Name: fmt.Sprintf("%v value %v", dt, cv), Kind: "value", ClipValue: math.Float64bits(cv)}, v, d)
		}
	}
	mixed := []pg.Dtype{pg.Float32, pg.Float64, pg.Float32, pg.Float64, pg.Float32, pg.Float32, pg.Float64, pg.Float32}
	add(clipCase{Name: "mixed dtypes", Kind: "norm", MaxNorm: math.Float64bits(0.5), NormType: math.Float64bits(2)},
		clipGrads(rng, mixed, clipShapes), mixed)
	return cases, vals, dts
}

func tensorsOf(vals [][]float64, dtypes []pg.Dtype) []pg.Tensor {
	out := make([]pg.Tensor, len(vals))
	for i, v := range vals {
		out[i] = convert(pg.Float64s(append([]float64(nil), v...)), dtypes[i])
	}
	return out
}

// runTorchClip runs testdata/clip_torch.py on the cases.
func runTorchClip(t *testing.T, cases []clipCase) (capability string, results []clipResult) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no torch (apt-get install python3-torch; scripts/test.sh does)")
	}
	in := filepath.Join(t.TempDir(), "cases.json")
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "testdata/clip_torch.py", in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("testdata/clip_torch.py: %v", err)
	}
	var got struct {
		Torch, Capability string
		Results           []clipResult
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("torch %s, CPU capability %s", got.Torch, got.Capability)
	return got.Capability, got.Results
}

// TestClipMatchesTorch compares ClipGradNorm and ClipGradValue with
// Debian's torch 1.13 (testdata/clip_torch.py) on every case of
// clipCases: the total norm and every clipped gradient value. Where torch
// runs its AVX2 kernels, as it does on any x86-64 CPU with AVX2, they
// must be bitwise equal for norm types 1, 2 and +Inf and for
// clip_grad_value_ (Note [clip arithmetic]); otherwise, and for p = 3,
// within 4 float32 ulps or 1e-12 relative (float64). It logs the largest
// difference seen for each dtype.
func TestClipMatchesTorch(t *testing.T) {
	cases, vals, dts := clipCases(t)
	capability, want := runTorchClip(t, cases)
	if len(want) != len(cases) {
		t.Fatalf("torch returned %d results for %d cases", len(want), len(cases))
	}
	var worst clipDiff
	for i, c := range cases {
		got, err := goClip(c, vals[i], dts[i])
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		p := math.Float64frombits(c.NormType)
		exact := capability == "AVX2" && (c.Kind == "value" || p == 1 || p == 2 || math.IsInf(p, 1))
		d := compareClip(got, want[i], dts[i])
		worst.merge(d)
		if d.differ > 0 {
			t.Logf("%s: %s", c.Name, d)
		}
		if d.ulps32 > 0 && exact || d.ulps32 > 4 || d.rel64 > 0 && exact || d.rel64 > 1e-12 || d.shape != "" {
			t.Errorf("%s: Go and torch differ: %s", c.Name, d)
		}
	}
	t.Logf("%d cases (%d values); largest difference from torch: %s", len(cases), worst.values, worst)
}

// clipDiff is how far Go's results are from torch's: the most float32
// ulps, the largest float64 relative difference, and what first differed.
type clipDiff struct {
	ulps32 uint64
	rel64  float64
	values int
	differ int // values not bitwise equal
	first  string
	shape  string
}

func (d *clipDiff) merge(o clipDiff) {
	d.ulps32, d.rel64 = max(d.ulps32, o.ulps32), max(d.rel64, o.rel64)
	d.values, d.differ = d.values+o.values, d.differ+o.differ
	if d.first == "" {
		d.first = o.first
	}
}

func (d clipDiff) String() string {
	s := fmt.Sprintf("%d values not bitwise equal; at most %d float32 ulps, %.3g float64 relative", d.differ, d.ulps32,
		d.rel64)
	if d.first != "" {
		s += "; first: " + d.first
	}
	return s + d.shape
}

func (d *clipDiff) add(where string, got, want uint64, dt pg.Dtype) {
	d.values++
	if got == want {
		return
	}
	d.differ++
	g, w := math.Float64frombits(got), math.Float64frombits(want)
	if d.first == "" {
		d.first = fmt.Sprintf("%s: %v, torch %v", where, g, w)
	}
	if dt == pg.Float32 {
		d.ulps32 = max(d.ulps32, ulps32(float32(g), float32(w)))
		return
	}
	if math.IsNaN(g) || math.IsNaN(w) || math.IsInf(g, 0) || math.IsInf(w, 0) {
		d.rel64 = math.Inf(1)
		return
	}
	d.rel64 = max(d.rel64, math.Abs(g-w)/max(math.Abs(w), math.SmallestNonzeroFloat64))
}

// ulps32 is how many float32 values lie from a to b; NaNs with other
// bits count as far apart.
func ulps32(a, b float32) uint64 {
	ord := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	if a != a || b != b {
		if math.Float32bits(a) == math.Float32bits(b) {
			return 0
		}
		return math.MaxUint32
	}
	diff := ord(a) - ord(b)
	if diff < 0 {
		diff = -diff
	}
	return uint64(diff)
}

func compareClip(got, want clipResult, dts []pg.Dtype) clipDiff {
	var d clipDiff
	if (got.TotalNorm == nil) != (want.TotalNorm == nil) || len(got.Grads) != len(want.Grads) {
		d.shape = "; the results' shapes differ"
		return d
	}
	if got.TotalNorm != nil {
		dt := pg.Float32
		for _, x := range dts {
			if x == pg.Float64 {
				dt = pg.Float64
			}
		}
		d.add("total norm", *got.TotalNorm, *want.TotalNorm, dt)
	}
	for i := range got.Grads {
		if len(got.Grads[i]) != len(want.Grads[i]) || (got.Grads[i] == nil) != (want.Grads[i] == nil) {
			d.shape = fmt.Sprintf("; gradient %d has %d values, torch's %d", i, len(got.Grads[i]), len(want.Grads[i]))
			return d
		}
		for k := range got.Grads[i] {
			d.add(fmt.Sprintf("gradient %d[%d]", i, k), got.Grads[i][k], want.Grads[i][k], dts[i])
		}
	}
	return d
}
