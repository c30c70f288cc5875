package commhook_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// halfFormat is float16 or bfloat16 for the reference.
type halfFormat struct {
	dtype  pg.Dtype
	widen  func(uint16) float32
	narrow func(float32) uint16
}

var (
	f16  = halfFormat{pg.Float16, backend.F16ToF32, backend.F32ToF16}
	bf16 = halfFormat{pg.BFloat16, backend.BF16ToF32, backend.F32ToBF16}
)

// compressReference is torch's fp16_compress_hook computed serially for
// one element: each rank casts its value (float64 through float32, as
// c10 does), divides by the world size in float32 and rounds; the sum
// accumulates in float32 in rank order and rounds once (pg/local's
// order); the result is cast back.
func compressReference(h halfFormat, in []float64) float64 {
	var sum float32
	for _, x := range in {
		c := h.narrow(float32(x))
		c = h.narrow(h.widen(c) / float32(len(in)))
		sum += h.widen(c)
	}
	return float64(h.widen(h.narrow(sum)))
}

// gradients for the compress tests: a spread of magnitudes, and values
// so large that summing them before dividing would overflow float16.
func compressInputs(world, n int) [][]float64 {
	in := make([][]float64, world)
	for r := range in {
		in[r] = make([]float64, n)
		for i := range in[r] {
			x := math.Sin(float64(1+i*world+r)) * math.Pow(10, float64(i%9-6))
			if i%17 == 0 {
				x = 30000 + float64(r)*1000.123
			}
			in[r][i] = x
		}
	}
	return in
}

func runCompressHook(t *testing.T, gs []pg.ProcessGroup, h commhook.Hook, d pg.Dtype, in [][]float64) [][]float64 {
	t.Helper()
	ctx := testCtx(t)
	out := make([][]float64, len(gs))
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		bs := newBuckets(d, [][]layer{{{len(in[r])}}})
		fill(bs, func(_, i int) float64 { return in[r][i] })
		if err := iterate(ctx, h, g, bs); err != nil {
			return err
		}
		out[r] = values(bs[0])
		return nil
	})
	return out
}

// On pg/local the order of every operation is pinned, so the fp16 and
// bf16 hooks must match the serial reference bit for bit, on float32 and
// float64 buckets, with a world size that does not divide exactly.
func TestCompressHooksMatchTheReferenceBitwise(t *testing.T) {
	const world, n = 3, 200
	in := compressInputs(world, n)
	gs := localGroups(t, world)
	for _, c := range []struct {
		name string
		hook commhook.Hook
		h    halfFormat
	}{{"fp16", commhook.FP16Compress(), f16}, {"bf16", commhook.BF16Compress(), bf16}} {
		for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
			t.Run(c.name+"/"+d.String(), func(t *testing.T) {
				out := runCompressHook(t, gs, c.hook, d, in)
				for i := range n {
					col := []float64{in[0][i], in[1][i], in[2][i]}
					want := compressReference(c.h, col)
					for r := range world {
						if got := out[r][i]; got != want || math.IsInf(got, 0) {
							t.Fatalf("rank %d element %d: got %v, want %v (inputs %v)", r, i, got, want, col)
						}
					}
				}
			})
		}
	}
}

// Over TCP with three ranks the ring rounds to float16 after each hop,
// in an order that depends on the element's chunk: the result must be
// within float16 rounding of the reference, and the same on every rank.
func TestFP16OverTCPWithinRounding(t *testing.T) {
	const world, n = 3, 300
	in := compressInputs(world, n)
	out := runCompressHook(t, tcpGroups(t, world, 0), commhook.FP16Compress(), pg.Float32, in)
	for i := range n {
		want := compressReference(f16, []float64{in[0][i], in[1][i], in[2][i]})
		ulp := float64(f16.widen(f16.narrow(float32(math.Abs(want)))+1)) - math.Abs(want)
		for r := range world {
			if out[r][i] != out[0][i] {
				t.Fatalf("element %d: rank %d has %v, rank 0 %v", i, r, out[r][i], out[0][i])
			}
		}
		if d := math.Abs(out[0][i] - want); d > 2*ulp {
			t.Fatalf("element %d: got %v, want %v within 2 float16 ulps (%v)", i, out[0][i], want, ulp)
		}
	}
}

// Compress around any hook: the inner hook sees a float16 buffer and the
// same views; its result comes back converted.
func TestCompressWrapsAnyHook(t *testing.T) {
	gs := localGroups(t, 2)
	var seen []pg.Dtype
	sum := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		if g.Rank() == 0 {
			seen = append(seen, b.Buffer.Dtype)
		}
		if b.Params[1].Offset != 2 || b.Gradient(1).Dtype != pg.BFloat16 {
			return pg.Completed(context.Canceled)
		}
		return g.AllReduce(ctx, b.Buffer, pg.Op(pg.Sum))
	})
	h := commhook.Compress(pg.BFloat16, sum)
	if got := commhook.Name(h); got != "bf16_compress_wrapper(custom)" {
		t.Errorf("name %q", got)
	}
	in := [][]float64{{1, 2, 3.3, 1e30}, {0.5, -2, 1, 1e30}}
	out := make([][]float64, 2)
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		bs := newBuckets(pg.Float64, [][]layer{{{2}, {2}}})
		fill(bs, func(_, i int) float64 { return in[r][i] })
		err := iterate(testCtx(t), h, g, bs)
		out[r] = values(bs[0])
		return err
	})
	for i := range in[0] {
		want := float64(
			backend.BF16ToF32(
				backend.F32ToBF16(
					backend.BF16ToF32(backend.F32ToBF16(float32(in[0][i]))) + backend.BF16ToF32(
						backend.F32ToBF16(float32(in[1][i]))))))
		if out[0][i] != want || out[1][i] != want {
			t.Errorf("element %d: got %v and %v, want %v", i, out[0][i], out[1][i], want)
		}
	}
	if !slices.Equal(seen, []pg.Dtype{pg.BFloat16}) {
		t.Errorf("the inner hook saw %v", seen)
	}
}

// Compress(Float16, Allreduce) is the fp16 hook, and a bucket already in
// the compressed dtype is passed through.
func TestCompressOfAllreduceIsFP16Compress(t *testing.T) {
	const world = 3
	in := compressInputs(world, 64)
	gs := localGroups(t, world)
	a := runCompressHook(t, gs, commhook.FP16Compress(), pg.Float32, in)
	b := runCompressHook(t, gs, commhook.Compress(pg.Float16, commhook.Allreduce{}), pg.Float32, in)
	for r := range a {
		if !slices.Equal(a[r], b[r]) {
			t.Fatalf("rank %d: %v vs %v", r, a[r], b[r])
		}
	}
	c := runCompressHook(t, gs, commhook.FP16Compress(), pg.Float16, in)
	for i := range c[0] {
		if c[0][i] != a[0][i] {
			t.Fatalf("a float16 bucket: element %d is %v, a float32 bucket gave %v", i, c[0][i], a[0][i])
		}
	}
	if commhook.Name(commhook.FP16Compress()) != "fp16_compress" ||
		commhook.Name(commhook.BF16Compress()) != "bf16_compress" {
		t.Error("names")
	}
}

func TestCompressFailures(t *testing.T) {
	gs := localGroups(t, 1)
	bad := commhook.Compress(pg.Int32, commhook.Noop{})
	bs := newBuckets(pg.Float32, [][]layer{{{3}}})
	if err := iterate(testCtx(t), bad, gs[0], bs); err == nil {
		t.Error("compressing to int32 succeeded")
	}
	nilWork := commhook.Compress(pg.Float16,
		commhook.HookFunc(func(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work { return nil }))
	if err := iterate(testCtx(t), nilWork, gs[0], bs); err == nil {
		t.Error("a nil Work went unnoticed")
	}
	st, ok := commhook.FP16Compress().(commhook.Stateful)
	if !ok || st.State() != nil || st.LoadState(nil) != nil || st.LoadState(map[string][]float64{"x": {1}}) == nil {
		t.Error("a compress wrapper around a stateless hook has an empty state")
	}
}
