package reducer

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Note [bucket transports]: how a bucket reaches the wire and its result
// comes back is one of three paths, chosen once at New:
//
//   - host: the comm hook runs on the host bucket, and the results are
//     copied back into the gradients (hostTransport);
//   - mixed precision: the same, through the upcast hook, and the results
//     are cast into each parameter's own dtype (mixedTransport, mixed.go);
//   - device: the group allocates device buckets (Note [device buckets]),
//     so every bucket gets a device twin and the collectives run on it;
//     until the twins serve the current plan, or when the hook has no
//     device form, the host path underneath does the work
//     (deviceTransport, device.go).
//
// The driver performs the machine's install, upload, launch and write back
// through it; the NaN screening (checkBucket) asks it which slots the host
// bucket holds; the accessors read results (Gradient, CheckFinite) and the
// twins' registrations (DeviceBuckets) through it. Nothing outside the
// transport touches a device twin. The methods are listed in the order an
// iteration meets them.
type transport interface {
	hostOnly() bool                                          // no device twins, nor will be: the machine's evBegan
	install(final bool) error                                // Prepare of a synchronised iteration: the device twins
	upload(i int) error                                      // MarkReady: parameter i's slot to the wire
	screen(b int, zero func(slot int) bool) error            // the NaN screening of bucket b's host slots (origin.go)
	launch(b int, screen bool) pg.Work                       // bucket b's communication
	writeBack(ctx context.Context, globalUsed []int32) error // every result into its gradient
	result(i int) pg.Tensor                                  // parameter i's result, as Gradient returns it
	registrations() []string                                 // DeviceBuckets, with r.mu held
	close() error                                            // Close: what the transport holds beyond Go memory
}

// newTransport picks r's transport (Note [bucket transports]) once r.hook
// is set; the mixed precision path replaces it with the upcast hook.
func newTransport(r *Reducer) transport {
	var host transport = hostTransport{r}
	if r.opts.MixedPrecision != nil {
		host = newMixedTransport(r) // mixed.go
	}
	if a := deviceAllocator(r.g, r.opts); a != nil { // device.go
		return &deviceTransport{r: r, host: host, alloc: a}
	}
	return host
}

// hostTransport runs the comm hook on the host buckets.
type hostTransport struct{ r *Reducer }

func (hostTransport) hostOnly() bool { return true }

func (hostTransport) install(bool) error { return nil }

func (hostTransport) upload(int) error { return nil }

// screen visits every slot of bucket b: the host bucket holds them all.
func (t hostTransport) screen(b int, zero func(slot int) bool) error {
	for j := range t.r.layout.buckets[b].Params {
		zero(j)
	}
	return nil
}

// launch calls the hook on bucket b, turning a panic into a failed Work:
// a panic on Gorgonia's tape goroutine would kill the process.
func (t hostTransport) launch(b int, _ bool) (w pg.Work) {
	r, gb := t.r, &t.r.layout.grads[b]
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("comm hook panicked", zap.Int("bucket", gb.Index), zap.Any("panic", p),
				zap.ByteString("stack", debug.Stack()))
			w = pg.Completed(fmt.Errorf("reducer: comm hook %q panicked on bucket %d: %v", commhook.Name(r.hook), gb.Index, p))
		}
	}()
	// uneven.go: the active ranks, when a Join does not divide by the world size.
	gb.Divisor = r.iter.divisor
	w = r.hook.Run(r.iter.ctx, r.obs.hookGroup(r.g), gb) // observe.go: with metrics, a group that counts bytes
	if w == nil {
		w = pg.Completed(fmt.Errorf("reducer: comm hook %q returned no Work for bucket %d", commhook.Name(r.hook), gb.Index))
	}
	return w
}

// writeBack copies each result from its bucket into the gradient it came
// from. Parameters unused on every rank keep their gradient untouched.
func (t hostTransport) writeBack(_ context.Context, globalUsed []int32) error {
	r := t.r
	for i, dst := range r.dst {
		if dst.Data == nil || (globalUsed != nil && globalUsed[i] == 0) {
			continue
		}
		v := r.layout.view(i)
		if sameMemory(dst, v) {
			continue // the gradient is its bucket view: Note [gradient as bucket view]
		}
		r.copies.out.Add(int64(len(v.Data)))
		copy(dst.Data, v.Data)
	}
	return nil
}

func (t hostTransport) result(i int) pg.Tensor { return t.r.layout.view(i) }

func (hostTransport) registrations() []string { return nil }

func (hostTransport) close() error { return nil }
