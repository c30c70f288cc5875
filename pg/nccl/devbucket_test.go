package nccl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
	"github.com/goddp/ddp/pg/nccl/internal/fake"
)

func TestChoosePolicy(t *testing.T) {
	full := binding.Caps{Version: 22800, MemAlloc: true, Register: true, Window: true}
	for _, tc := range []struct {
		caps binding.Caps
		want Registration
		in   Registration
		why  string
	}{
		{full, RegisterWindow, RegisterAuto, "2.27"},
		{binding.Caps{Version: 22800, MemAlloc: true, Register: true}, RegisterUser, RegisterAuto,
			"lacks the ncclCommWindowRegister"},
		{binding.Caps{Version: 22603, MemAlloc: true, Register: true}, RegisterUser, RegisterAuto,
			"no ncclCommWindowRegister"},
		{binding.Caps{Version: 21805}, RegisterNone, RegisterAuto, "neither"},
		{full, RegisterNone, RegisterNone, "asks for plain"},
		{full, RegisterUser, RegisterUser, "asks for ncclCommRegister"},
		{binding.Caps{Version: 21805}, RegisterNone, RegisterUser, "lacks"},
	} {
		got, why := choosePolicy(tc.caps, tc.in)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("choosePolicy(%+v, %v) = %v (%q), want %v saying %q", tc.caps, tc.in, got, why, tc.want, tc.why)
		}
	}
}

// bucketWorld runs f on every rank of a fake world made with reg and o, with a
// logger per rank, and closes the groups.
func bucketWorld(t *testing.T, n int, reg Registration, o fake.Options,
	f func(r int, g *Group, b *fake.Backend)) ([]*fake.Backend, []*observer.ObservedLogs) {
	t.Helper()
	logs := make([]*observer.ObservedLogs, n)
	var lg []*zap.Logger
	for r := range n {
		core, l := observer.New(zap.DebugLevel)
		logs[r] = l
		lg = append(lg, zap.New(core))
	}
	gs, bs, cleanup, err := newFakeWorld(n, Options{BucketRegistration: reg}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	for r, g := range gs {
		g.log = lg[r].With(zap.Int("rank", r))
	}
	var wg sync.WaitGroup
	for r := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(r, gs[r], bs[r])
		}()
	}
	wg.Wait()
	for r, g := range gs {
		if err := g.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
	}
	return bs, logs
}

func logged(l *observer.ObservedLogs, msg string) []string {
	var out []string
	for _, e := range l.FilterMessage(msg).All() {
		s := e.Message
		for _, f := range e.Context {
			if f.String != "" {
				s += " " + f.Key + "=" + f.String
			}
			if f.Key == "error" {
				s += fmt.Sprintf(" error=%v", f.Interface)
			}
		}
		out = append(out, s)
	}
	return out
}

// The policy follows the library, each fallback is logged, and Close
// releases every registration and window.
func TestDeviceBucketPolicyAndFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        fake.Options
		reg      Registration
		fail     func(b *fake.Backend)
		want     string // the buckets' Registration
		chose    string // the policy logged
		fallback string // a warning logged, or ""
		window   bool
	}{
		{name: "2.28 windows", want: "window", chose: "window", window: true},
		{name: "2.26 register", o: fake.Options{Version: 22603, NoWindows: true}, want: "register", chose: "register"},
		{name: "2.28 window symbol missing", o: fake.Options{NoWindows: true}, want: "register", chose: "register"},
		{name: "2.18 plain", o: fake.Options{Version: 21805, NoWindows: true, NoRegister: true, NoMemAlloc: true},
			want: "none", chose: "none"},
		{name: "window fails", fail: func(b *fake.Backend) { b.FailWindows() }, want: "register", chose: "window",
			fallback: "nccl: ncclCommWindowRegister failed; falling back to ncclCommRegister"},
		{name: "window and register fail", fail: func(b *fake.Backend) { b.FailWindows(); b.FailRegister() },
			want: "none", chose: "window", fallback: "nccl: ncclCommRegister failed; using the buffer unregistered"},
		{name: "memalloc fails", fail: func(b *fake.Backend) { b.FailMemAlloc() }, want: "register", chose: "window",
			fallback: "nccl: ncclMemAlloc failed; using cuMemAlloc"},
		{name: "forced none", reg: RegisterNone, want: "none", chose: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			regs := map[string]int{}
			bs, logs := bucketWorld(t, 2, tc.reg, tc.o, func(r int, g *Group, b *fake.Backend) {
				if tc.fail != nil {
					tc.fail(b)
				}
				ctx := context.Background()
				for _, n := range []int{5, 1000} {
					db, err := g.NewDeviceBucket(ctx, pg.Float32, n, true)
					if err != nil {
						t.Errorf("rank %d: NewDeviceBucket: %v", r, err)
						return
					}
					mu.Lock()
					regs[db.Registration()]++
					mu.Unlock()
				}
				if got := b.Live(); tc.want != "none" && got != 2 {
					t.Errorf("rank %d: %d live registrations after two buckets, want 2", r, got)
				}
			})
			if regs[tc.want] != 4 {
				t.Errorf("registrations %v, want 4 of %q", regs, tc.want)
			}
			for r, b := range bs {
				if n := b.Live(); n != 0 {
					t.Errorf("rank %d: %d registrations left after Close", r, n)
				}
				tr := b.Trace()
				if tc.window && !slices.Contains(tr, "dewindow") {
					t.Errorf("rank %d: no window deregistered at Close: %v", r, tr)
				}
				if b.MemAllocs() > 0 && strings.Count(strings.Join(tr, ","), "memFree") != int(b.MemAllocs()) {
					t.Errorf("rank %d: %d ncclMemAlloc, trace %v", r, b.MemAllocs(), tr)
				}
				chose := logged(logs[r], "nccl: device bucket registration")
				if len(chose) != 1 || !strings.Contains(chose[0], "policy="+tc.chose) || !strings.Contains(chose[0], "why=") {
					t.Errorf("rank %d: policy logged %q, want once with policy=%s and why", r, chose, tc.chose)
				}
				if tc.fallback != "" {
					if got := logged(logs[r], tc.fallback); len(got) != 2 {
						t.Errorf("rank %d: %q logged %d times (%v), want once per bucket", r, tc.fallback, len(got), got)
					}
				}
			}
		})
	}
}

// Uploads go through the copy stream; the collective's stream waits on
// the sealed upload's event (on the device), and the result comes back
// once per bucket.
func TestDeviceBucketCollectiveWaitsOnUpload(t *testing.T) {
	const n = 3
	bucketWorld(t, n, RegisterAuto, fake.Options{}, func(r int, g *Group, b *fake.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		db, err := g.NewDeviceBucket(ctx, pg.Float64, 4, true)
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		release := b.HoldCopies()
		// Two gradients of the bucket, uploaded as they become ready.
		if err := db.Upload(0, pg.Float64s([]float64{float64(r), 1})); err != nil {
			t.Error(err)
		}
		hostGrad := []float64{2, float64(10 * r)}
		if err := db.Upload(2, pg.Float64s(hostGrad)); err != nil {
			t.Error(err)
		}
		hostGrad[0] = -99 // Upload staged it: the caller may reuse its memory
		if err := db.Seal(); err != nil {
			t.Error(err)
		}
		w := g.AllReduce(ctx, db.Tensor(), pg.Op(pg.Sum))
		// The group's stream must now be blocked in the wait, with the
		// copies held: the collective has not run.
		for !slices.Contains(b.Trace(), "wait") {
			if ctx.Err() != nil {
				t.Errorf("rank %d: the group's stream never waited for the upload event; trace %v", r, b.Trace())
				release()
				return
			}
			time.Sleep(time.Millisecond)
		}
		if slices.Contains(b.Trace(), "allReduce") {
			t.Errorf("rank %d: the allreduce ran before its upload: %v", r, b.Trace())
		}
		release()
		if err := w.Wait(ctx); err != nil {
			t.Error(err)
			return
		}
		out := make([]float64, 4)
		if err := db.Download(ctx, 0, pg.Float64s(out)); err != nil {
			t.Error(err)
		}
		want := []float64{0 + 1 + 2, 3, 6, 0 + 10 + 20}
		if !slices.Equal(out, want) {
			t.Errorf("rank %d: result %v, want %v", r, out, want)
		}
		tr := b.Trace()
		// The wait began before the copies ran (they were held) and ended
		// after the event: the collective ran after its upload.
		order := []string{"wait", "h2d", "h2d", "event", "waited", "allReduce", "d2h"}
		var got []string
		for _, s := range tr {
			if slices.Contains(order, s) {
				got = append(got, s)
			}
		}
		if !slices.Equal(got, order) {
			t.Errorf("rank %d: ran %v, want %v", r, got, order)
		}
	})
}

// Device sources are copied on the device; bad arguments are refused.
func TestDeviceBucketDeviceSourceAndErrors(t *testing.T) {
	bucketWorld(t, 1, RegisterAuto, fake.Options{}, func(r int, g *Group, b *fake.Backend) {
		ctx := context.Background()
		db, err := g.NewDeviceBucket(ctx, pg.Float32, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		src := b.Alloc(12)
		copy(b.At(src, 12), pg.Float32s([]float32{1, 2, 3}).Data)
		dev := pg.DeviceTensor(pg.Float32, 0, uintptr(src), 12)
		if err := db.Upload(0, dev); err != nil {
			t.Fatal(err)
		}
		if err := db.Seal(); err != nil {
			t.Fatal(err)
		}
		if err := g.AllReduce(ctx, db.Tensor(), pg.Op(pg.Sum)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		dst := b.Alloc(8)
		if err := db.Download(ctx, 1, pg.DeviceTensor(pg.Float32, 0, uintptr(dst), 8)); err != nil {
			t.Fatal(err)
		}
		if got := pg.View[float32](pg.Tensor{Dtype: pg.Float32, Data: b.At(dst, 8)}); !slices.Equal(got, []float32{2, 3}) {
			t.Errorf("device download %v, want [2 3]", got)
		}
		for _, bad := range []struct {
			err  error
			want string
		}{
			{db.Upload(0, pg.Float64s([]float64{1})), "float64 tensor into a float32"},
			{db.Upload(2, pg.Float32s([]float32{1, 2})), "[2, 4) of a device bucket of 3"},
			{db.Upload(0, pg.DeviceTensor(pg.Float32, 1, 8, 4)), "GPU 1"},
		} {
			if bad.err == nil || !strings.Contains(bad.err.Error(), bad.want) {
				t.Errorf("got %v, want an error saying %q", bad.err, bad.want)
			}
		}
		if _, err := g.NewDeviceBucket(ctx, pg.Float32, 0, true); err == nil {
			t.Error("a bucket of 0 elements was made")
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Upload(0, pg.Float32s([]float32{1})); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Upload after Close: %v", err)
		}
		if b.Live() != 0 {
			t.Errorf("%d registrations left after the bucket's Close", b.Live())
		}
	})
}
