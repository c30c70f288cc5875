package reducer

import (
	"context"

	"github.com/goddp/ddp/pg"
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
// through it, and reads a result (Gradient, CheckFinite) through it.
type transport interface {
	install(final bool) error                                // Prepare of a synchronised iteration: the device twins
	upload(i int) error                                      // MarkReady: parameter i's slot to the wire
	launch(b int, screen bool) pg.Work                       // bucket b's communication
	writeBack(ctx context.Context, globalUsed []int32) error // every result into its gradient
	result(i int) pg.Tensor                                  // parameter i's result, as Gradient returns it
}

// newTransport picks the reducer's transport: Note [bucket transports].
func (r *Reducer) newTransport() transport {
	var host transport = hostTransport{r}
	if r.opts.MixedPrecision != nil {
		host = newMixedTransport(r) // mixed.go
	}
	if r.dev.alloc != nil {
		return deviceTransport{r: r, host: host}
	}
	return host
}

// hostTransport runs the comm hook on the host buckets.
type hostTransport struct{ r *Reducer }

func (hostTransport) install(bool) error { return nil }

func (hostTransport) upload(int) error { return nil }

func (t hostTransport) launch(b int, _ bool) pg.Work { return t.r.runHook(&t.r.layout.grads[b]) }

func (t hostTransport) result(i int) pg.Tensor { return t.r.layout.view(i) }

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
