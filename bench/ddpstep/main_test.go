package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest/testworld"
)

func TestIntervals(t *testing.T) {
	ms := func(a, b int) span {
		return span{time.Duration(a) * time.Millisecond, time.Duration(b) * time.Millisecond}
	}
	u := union([]span{ms(5, 9), ms(0, 2), ms(1, 3), ms(8, 12), ms(20, 21)})
	want := []span{ms(0, 3), ms(5, 12), ms(20, 21)}
	if len(u) != len(want) {
		t.Fatalf("union = %v, want %v", u, want)
	}
	for i := range u {
		if u[i] != want[i] {
			t.Fatalf("union = %v, want %v", u, want)
		}
	}
	if got := total(u); got != 11*time.Millisecond {
		t.Errorf("total = %v, want 11ms", got)
	}
	if got := within(u, ms(2, 10)); got != 6*time.Millisecond {
		t.Errorf("within [2,10] = %v, want 6ms (1 of [0,3], 5 of [5,12])", got)
	}
	if got := within(u, ms(30, 40)); got != 0 {
		t.Errorf("within [30,40] = %v, want 0", got)
	}
}

func TestParse(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "nccl"}, {"--nproc", "0"}, {"--warmup", "1"}, {"--hook", "zip"},
		{"--hook", "powersgd", "--powersgd-start-iter", "1"}, {"--format", "json"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	o, err := parse(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.backend != "tcp" || o.nproc != 2 || o.cfg.rows != 64 || len(o.cfg.sizes) != 5 {
		t.Errorf("defaults: %+v", o)
	}
}

// TestMeasure runs the whole measurement on a small model over two local
// ranks and checks the report's shape and the figures' sanity.
func TestMeasure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groups, err := local.New(2, local.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	// Small caps so the small model still gets several buckets.
	cfg := config{sizes: []int{16, 32, 32, 4}, rows: 4, steps: 3, warmup: 2, hook: "allreduce", bucketCapBytes: 4096,
		firstBucketBytes: 1024}
	results := make([]rankResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { results[r], errs[r] = measure(ctx, g, cfg) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	res := results[0]
	if len(res.samples) != cfg.steps {
		t.Fatalf("%d samples, want %d", len(res.samples), cfg.steps)
	}
	if len(res.plan) < 2 {
		t.Fatalf("plan %v: want several buckets", res.plan)
	}
	for i, s := range res.samples {
		if s.comm <= 0 || s.hidden > s.comm || s.fwd <= 0 || s.bwd <= 0 || len(s.buckets) != len(res.plan) {
			t.Errorf("sample %d is not sane: %+v", i, s)
		}
		if s.buckets[0].launch < 0 || s.buckets[0].launch > s.bwd {
			t.Errorf("sample %d: bucket 0 launched at %v, outside backward (%v long)", i, s.buckets[0].launch, s.bwd)
		}
	}
	var out bytes.Buffer
	report(&out, options{backend: "local", nproc: 2, format: "csv", cfg: cfg}, res)
	for _, key := range []string{"step_no_ddp_ms,", "step_ddp_ms,", "step_ratio,", "overlap,", "bucket1_overlap,",
		"#   0: "} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("report lacks %q:\n%s", key, out.String())
		}
	}
}

// TestCompareBucketView runs the comparison of copying buckets with bucket
// views and checks the copy counts: the copying replica copies every
// gradient in and out; the one with views copies nothing in the reducer,
// and its hooks place each gradient once.
func TestCompareBucketView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groups, err := local.New(2, local.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	cfg := config{sizes: []int{16, 32, 4}, rows: 4, steps: 3, warmup: 2, hook: "allreduce", bucketCapBytes: 1024,
		firstBucketBytes: 256, compareView: true}
	results := make([]rankResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { results[r], errs[r] = measure(ctx, g, cfg) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	grads := float64(4 * (16*32 + 32 + 32*4 + 4)) // float32 gradient bytes per step
	res := results[0]
	if c := res.copied; c.reducerIn != grads || c.reducerOut != grads || c.placed != 0 {
		t.Errorf("copying replica: %+v per step, want %v bytes in and out, none placed", c, grads)
	}
	if c := res.viewCopied; c.reducerIn != 0 || c.reducerOut != 0 || c.placed != grads || c.fallbacks != 0 {
		t.Errorf("replica with bucket views: %+v per step, want no reducer copy and %v bytes placed", c, grads)
	}
	for i, s := range res.samples {
		if s.viewStep <= 0 {
			t.Errorf("sample %d: no bucket-view step time", i)
		}
	}
	var out bytes.Buffer
	report(&out, options{backend: "local", nproc: 2, format: "csv", cfg: cfg}, res)
	for _, key := range []string{"view_step_ratio,", "copy_total_bytes,", "view_reducer_copy_in_bytes,0\n",
		"view_fallbacks,0\n"} {
		if !strings.Contains(out.String(), key) {
			t.Errorf("report lacks %q:\n%s", key, out.String())
		}
	}
	if _, err := parse([]string{"--gradient-as-bucket-view", "--compare-bucket-view"}, &bytes.Buffer{}); err == nil {
		t.Error("parse accepted both --gradient-as-bucket-view and --compare-bucket-view")
	}
}

// TestSyncHook checks --hook sync: it leaves the bucket alone and its Work
// finishes only once every rank has run it, as a real hook's would.
func TestSyncHook(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	groups := testworld.Local(t, 2)
	h, err := newHook(config{hook: "sync"})
	if err != nil {
		t.Fatal(err)
	}
	bufs := []pg.Tensor{pg.Float32s([]float32{1, 2, 3}), pg.Float32s([]float32{4, 5, 6})}
	w0 := h.Run(ctx, groups[0], &commhook.GradBucket{Buffer: bufs[0], IsLast: true})
	select {
	case <-w0.Done():
		t.Fatalf("rank 0's sync finished before rank 1 ran it (err %v)", w0.Err())
	case <-time.After(50 * time.Millisecond):
	}
	w1 := h.Run(ctx, groups[1], &commhook.GradBucket{Buffer: bufs[1], IsLast: true})
	for r, w := range []pg.Work{w0, w1} {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if got := pg.View[float32](bufs[0]); got[0] != 1 || got[2] != 3 {
		t.Errorf("rank 0's bucket changed: %v", got)
	}
	if got := pg.View[float32](bufs[1]); got[0] != 4 || got[2] != 6 {
		t.Errorf("rank 1's bucket changed: %v", got)
	}
}

// -h and --help print the usage with every flag as --flag and exit 0; a
// typo prints nothing here (cli.Main prints it and a hint) and exits 2.
func TestHelpAndTypo(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out bytes.Buffer
		_, err := parse([]string{arg}, &out)
		if cli.Code(err) != 0 || !strings.Contains(out.String(), "\n  --nproc int\n") ||
			strings.Contains(out.String(), "\n  -n") {
			t.Errorf("%s: %v (exit %d), usage:\n%s", arg, err, cli.Code(err), out.String())
		}
	}
	var out bytes.Buffer
	_, err := parse([]string{"--nprocs", "2"}, &out)
	var fe *cli.FlagError
	if cli.Code(err) != 2 || !errors.As(err, &fe) || fe.Suggest != "nproc" || out.Len() != 0 {
		t.Errorf("--nprocs: %v (exit %d), printed %q; want a flag error suggesting --nproc, exit 2, nothing printed", err,
			cli.Code(err), out.String())
	}
}
