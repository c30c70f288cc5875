package commhook_test

import (
	"math"
	"strings"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// adasumRef is a direct transcription of Horovod's definition, in
// float64: Adasum(a, b) = (1 - a·b/(2‖a‖²)) a + (1 - a·b/(2‖b‖²)) b, a
// coefficient left at 1 when its squared norm is below 1e-8.
func adasumRef(a, b []float64) []float64 {
	var dot, an, bn float64
	for i := range a {
		dot += a[i] * b[i]
		an += a[i] * a[i]
		bn += b[i] * b[i]
	}
	ca, cb := 1.0, 1.0
	if an >= 1e-8 {
		ca = 1 - dot/(2*an)
	}
	if bn >= 1e-8 {
		cb = 1 - dot/(2*bn)
	}
	out := make([]float64, len(a))
	for i := range a {
		out[i] = ca*a[i] + cb*b[i]
	}
	return out
}

// adasumTree applies adasumRef across ranks as a binary tree: ranks 2i
// and 2i+1, then pairs of pairs, the lower ranks' vector on the left.
func adasumTree(vs [][]float64) [][]float64 {
	for len(vs) > 1 {
		var next [][]float64
		for i := 0; i < len(vs); i += 2 {
			next = append(next, adasumRef(vs[i], vs[i+1]))
		}
		vs = next
	}
	return vs
}

// adasumPlan has tensors of odd lengths, so that the halving splits
// tensors between ranks, and several per bucket.
var adasumPlan = [][]layer{{{7, 3}, {5}, {1}}, {{33}}, {{2, 2}, {9}, {3}}}

// adasumReference computes the expected buckets from every rank's
// inputs (as float64), tensor by tensor.
func adasumReference(inputs [][]*commhook.GradBucket) [][]float64 {
	var want [][]float64
	for b, gb := range inputs[0] {
		out := make([]float64, gb.Buffer.Len())
		for _, p := range gb.Params {
			vs := make([][]float64, len(inputs))
			for r := range inputs {
				vs[r] = values(inputs[r][b])[p.Offset : p.Offset+p.Len]
			}
			copy(out[p.Offset:], adasumTree(vs)[0])
		}
		want = append(want, out)
	}
	return want
}

// runAdasum runs one iteration of Adasum on every rank with the buckets
// init fills, and returns the inputs and outputs.
func runAdasum(t *testing.T, gs []pg.ProcessGroup, d pg.Dtype, init func(r int, bs []*commhook.GradBucket)) (in,
	out [][]*commhook.GradBucket) {
	t.Helper()
	ctx := testCtx(t)
	in = make([][]*commhook.GradBucket, len(gs))
	out = make([][]*commhook.GradBucket, len(gs))
	for r := range gs {
		in[r] = newBuckets(d, adasumPlan)
		init(r, in[r])
		out[r] = newBuckets(d, adasumPlan)
		for b := range out[r] {
			copy(out[r][b].Buffer.Data, in[r][b].Buffer.Data)
		}
	}
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		return iterate(ctx, commhook.NewAdasum(), g, out[r])
	})
	return in, out
}

func checkClose(t *testing.T, out [][]*commhook.GradBucket, want [][]float64, tol float64) {
	t.Helper()
	for r := range out {
		for b, gb := range out[r] {
			got := values(gb)
			for i := range got {
				if d := math.Abs(got[i] - want[b][i]); d > tol*(1+math.Abs(want[b][i])) || math.IsNaN(got[i]) {
					t.Fatalf("rank %d bucket %d [%d] = %v, reference %v", r, b, i, got[i], want[b][i])
				}
			}
		}
	}
}

func TestAdasumMatchesTheFormula(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		for _, n := range []int{2, 4, 8} {
			if backend == "tcp" && n == 8 {
				continue
			}
			for _, d := range []pg.Dtype{pg.Float64, pg.Float32, pg.Float16} {
				tol := map[pg.Dtype]float64{pg.Float64: 1e-12, pg.Float32: 1e-5, pg.Float16: 1e-2}[d]
				t.Run(backend+"/"+string(rune('0'+n))+" ranks/"+d.String(), func(t *testing.T) {
					in, out := runAdasum(t, groupsOn(t, backend, n), d, func(r int, bs []*commhook.GradBucket) {
						randomGrads(bs, 11, r, 1)
						// Correlate the ranks' gradients, so that the
						// coefficients are far from 1.
						common := newBuckets(pg.Float64, adasumPlan)
						randomGrads(common, 12, 0, 1)
						for b := range bs {
							v, c := values(bs[b]), values(common[b])
							fill(bs[b:b+1], func(_, i int) float64 { return 0.5*v[i] + c[i] })
						}
					})
					checkClose(t, out, adasumReference(in), tol)
					for r := 1; r < n; r++ { // every rank ends with the same bits
						for b := range out[r] {
							if string(out[r][b].Buffer.Data) != string(out[0][b].Buffer.Data) {
								t.Fatalf("rank %d bucket %d differs from rank 0's", r, b)
							}
						}
					}
				})
			}
		}
	}
}

func TestAdasumProperties(t *testing.T) {
	t.Run("Adasum(a, a) = a", func(t *testing.T) {
		in, out := runAdasum(t, localGroups(t, 4), pg.Float64, func(_ int, bs []*commhook.GradBucket) {
			randomGrads(bs, 3, 0, 1) // every rank the same
		})
		var want [][]float64
		for _, gb := range in[0] {
			want = append(want, values(gb))
		}
		checkClose(t, out, want, 1e-14)
	})
	t.Run("orthogonal a, b give a + b", func(t *testing.T) {
		// Rank 0 holds the even elements of each tensor, rank 1 the odd.
		in, out := runAdasum(t, tcpGroups(t, 2, 0), pg.Float32, func(r int, bs []*commhook.GradBucket) {
			randomGrads(bs, 5, 0, 1)
			for b := range bs {
				v := values(bs[b])
				fill(bs[b:b+1], func(_, i int) float64 {
					if i%2 != r {
						return 0
					}
					return v[i]
				})
			}
		})
		var want [][]float64
		for b := range in[0] {
			s := values(in[0][b])
			for i, x := range values(in[1][b]) {
				s[i] += x
			}
			want = append(want, s)
		}
		checkClose(t, out, want, 0) // ca = cb = 1 exactly
	})
	t.Run("a zero tensor leaves the other", func(t *testing.T) {
		in, out := runAdasum(t, localGroups(t, 2), pg.Float64, func(r int, bs []*commhook.GradBucket) {
			randomGrads(bs, 9, r, 1)
			if r == 1 {
				fill(bs[1:2], func(int, int) float64 { return 0 })
			}
		})
		checkClose(t, out, adasumReference(in), 1e-12)
		want := values(in[0][1])
		checkClose(t, [][]*commhook.GradBucket{out[1][1:2]}, [][]float64{want}, 0)
	})
	t.Run("per tensor, not per bucket", func(t *testing.T) {
		// Tensor 0 of bucket 0 is parallel across the 2 ranks, the others
		// are not: a per-bucket dot product would not average it.
		_, out := runAdasum(t, localGroups(t, 2), pg.Float64, func(r int, bs []*commhook.GradBucket) {
			randomGrads(bs, 21, r, 1)
			p := bs[0].Params[0]
			v := values(bs[0])
			fill(bs[0:1], func(_, i int) float64 {
				if i < p.Offset+p.Len {
					return float64(i + 1)
				}
				return v[i]
			})
		})
		got := values(out[0][0])
		for i := range out[0][0].Params[0].Len {
			if math.Abs(got[i]-float64(i+1)) > 1e-12 {
				t.Fatalf("[%d] = %v, want %v: Adasum of a tensor with itself must be itself", i, got[i], i+1)
			}
		}
	})
}

func TestAdasumRefusesWhatHorovodRefuses(t *testing.T) {
	ctx := testCtx(t)
	gs := localGroups(t, 3)
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		b := newBuckets(pg.Float32, [][]layer{{{4}}})[0]
		err := commhook.NewAdasum().Run(ctx, g, b).Wait(ctx)
		if err == nil || !strings.Contains(err.Error(), "power-of-two") || !strings.Contains(err.Error(), "use 2 or 4") {
			t.Errorf("3 ranks: %v, want an error naming power-of-two sizes", err)
		}
		return nil
	})
	b := newBuckets(pg.Int32, [][]layer{{{4}}})[0]
	if err := commhook.NewAdasum().Run(ctx, gs[0], b).Wait(ctx); err == nil {
		t.Error("an int32 bucket was accepted")
	}
	dev := &commhook.GradBucket{Buffer: pg.DeviceTensor(pg.Float32, 0, 0x1000, 16), IsLast: true}
	if err := commhook.NewAdasum().Run(ctx, localGroups(t, 2)[0], dev).Wait(ctx); err == nil ||
		!strings.Contains(err.Error(), "device memory") {
		t.Errorf("a device bucket: %v, want an error saying Adasum computes on the host", err)
	}
}
