package nccl

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg"
)

// On a GPU: the registration the policy picks for the loaded NCCL (or the
// log saying why not), a round of upload / seal / allreduce / download on
// a registered bucket and on a plain one, and every registration released
// at Close.
func TestGPUDeviceBucket(t *testing.T) {
	gs := gpuWorld(t, 1, time.Minute)
	g := gs[0]
	core, logs := observer.New(zap.InfoLevel)
	g.log = zap.New(core)
	ctx := context.Background()
	for _, register := range []bool{true, false} {
		const n = 1<<20 + 3
		db, err := g.NewDeviceBucket(ctx, pg.Float32, n, register)
		if err != nil {
			t.Fatalf("NewDeviceBucket(register=%v): %v", register, err)
		}
		t.Logf("GPU-FACT device bucket register=%v: %s (nccl %v)", register, db.Registration(), g.opts.Library.Version())
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(i%977) / 8
		}
		for off := 0; off < n; off += n / 3 { // three "gradients", uploaded as they come
			end := min(off+n/3, n)
			if err := db.Upload(off, pg.Float32s(in[off:end])); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Seal(); err != nil {
			t.Fatal(err)
		}
		if err := g.AllReduce(ctx, db.Tensor(), pg.Op(pg.Sum)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, n)
		if err := db.Download(ctx, 0, pg.Float32s(out)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out, in) {
			t.Errorf("register=%v: a world-of-one allreduce on the device bucket changed it", register)
		}
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	for _, e := range logs.All() {
		t.Logf("GPU-FACT log: %s %v", e.Message, e.ContextMap())
	}
	if err := g.Close(); err != nil {
		t.Error(err)
	}
}

// BenchmarkGPUBucketRegistration is the cost of making a device bucket:
// registered (the policy's choice: window or ncclCommRegister) against
// plain cuMemAlloc, 1 MiB to 1 GiB. Compare the two in one run.
func BenchmarkGPUBucketRegistration(b *testing.B) {
	gs := gpuWorld(b, 1, time.Minute)
	defer gs[0].Close()
	ctx := context.Background()
	for _, size := range gpuBenchSizes() {
		for _, register := range []bool{false, true} {
			b.Run(fmt.Sprintf("bytes=%d/registered=%v", size, register), func(b *testing.B) {
				for b.Loop() {
					db, err := gs[0].NewDeviceBucket(ctx, pg.Float32, size/4, register)
					if err != nil {
						b.Fatal(err)
					}
					if err := db.Close(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkGPUBucketAllReduce is an allreduce on a registered device
// bucket against one on a plain buffer, 1 MiB to 1 GiB, in one run; the
// ratio of the two is the figure.
func BenchmarkGPUBucketAllReduce(b *testing.B) {
	gs := gpuWorld(b, 1, time.Minute)
	defer gs[0].Close()
	ctx := context.Background()
	for _, size := range gpuBenchSizes() {
		for _, register := range []bool{false, true} {
			b.Run(fmt.Sprintf("bytes=%d/registered=%v", size, register), func(b *testing.B) {
				db, err := gs[0].NewDeviceBucket(ctx, pg.Float32, size/4, register)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				b.SetBytes(int64(size))
				for b.Loop() {
					if err := gs[0].AllReduce(ctx, db.Tensor(), pg.Op(pg.Sum)).Wait(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func gpuBenchSizes() []int {
	var out []int
	for s := 1 << 20; s <= 1<<30; s <<= 2 {
		out = append(out, s)
	}
	return out
}
