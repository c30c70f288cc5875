package reducer

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"go.uber.org/zap"
)

// Note [device buckets]: when the process group can allocate device
// buckets (backend.DeviceBucketAllocator: an NCCL group) and Options.HostBuckets
// is off, every bucket gets a twin in device memory, and the collectives
// run on the twin:
//
//   - A host gradient is stored in its host bucket as always (copied, or
//     added while accumulating), then, as it becomes ready, prepared for
//     the wire on the host (divided by the world size, cast to fp16/bf16
//     for the compression hooks) and uploaded asynchronously on the
//     group's copy stream through pinned memory.
//   - A device gradient (a pg.DeviceTensor in MarkReady) is copied into
//     the twin on the device; the hook's division then runs on the host
//     once per bucket (downloaded, divided, uploaded), since goddp has no
//     GPU kernels. Accumulation (no_sync) of device gradients is refused.
//   - When the bucket is complete it is sealed: the allreduce the reducer
//     issues waits on the device for the copies' event, not on the host.
//   - When the allreduce is done the bucket comes back to the host once
//     (cast back for the compression hooks), and Finalize writes results
//     into host gradients as before, and into device gradients on the
//     device.
//
// Hooks: a hook says whether and how it runs on device buckets by
// implementing commhook.DeviceHook; the reducer never looks at its name.
// allreduce and noop run on the device; fp16_compress and bf16_compress
// (and the compress wrappers around allreduce) compress on the host
// before the upload, so half the bytes cross PCIe, and reduce in half
// precision on the device. PowerSGD, which needs matrix products, refuses
// with an error saying to set HostBuckets. Every other hook (Adasum,
// hierarchical, mixed precision's, a custom hook that does not implement
// DeviceHook) keeps the buckets on the host, logged.
//
// The twins of the first plan are plain device memory; at the rebuild
// after the first iteration they are replaced, once, by buckets registered
// with NCCL as the group's policy says (symmetric windows on NCCL 2.27+).
// Close releases them.

// deviceTransport runs the collectives on the device twins while they
// serve the current plan, and leaves the rest to the host path under it
// (Note [bucket transports]). r.mu guards alloc, kind, buckets and layout
// against the read-only accessors; install writes them with r.mu held,
// and the iteration's actions read them while the machine is busy.
type deviceTransport struct {
	r       *Reducer
	host    transport                     // hostTransport or mixedTransport
	alloc   backend.DeviceBucketAllocator // nil once the hook has no device form: host buckets only
	kind    commhook.DeviceKind
	buckets []*devBucket
	layout  *layout // the plan the twins were made for
}

// devBucket is one bucket's device twin.
type devBucket struct {
	db       backend.DeviceBucket
	scratch  pg.Tensor // host, in the wire dtype: a gradient prepared for upload
	uploaded []bool    // per slot, this iteration
	onDevice []bool    // per slot: the gradient came from the device (not divided yet)
}

// deviceAllocator is the group's device-bucket allocator, itself or
// behind wrappers (pg.As; the collectives still go through the wrappers),
// or nil when it has none or Options.HostBuckets is set.
func deviceAllocator(g pg.ProcessGroup, opts Options) backend.DeviceBucketAllocator {
	if opts.HostBuckets {
		return nil
	}
	var a backend.DeviceBucketAllocator
	if pg.As(g, &a) {
		return a
	}
	return nil
}

// hostOnly reports that there are no twins, nor will be: the hook has no
// device form.
func (t *deviceTransport) hostOnly() bool { return t.alloc == nil }

// active reports whether the installed twins serve this iteration.
func (t *deviceTransport) active() bool {
	return t.alloc != nil && t.layout == t.r.layout && len(t.buckets) > 0
}

// install, from Prepare of a synchronised iteration after any rebuild,
// installs the device twins of the current plan, registered ones when
// final; the machine decides when (planTwins). The hook says whether and
// how it runs on device buckets (commhook.DeviceHook); without a device
// form the allocator is dropped, and Prepare tells the machine
// (hostOnly). It allocates and frees with r.mu released: the machine is
// busy, and DeviceBuckets sees the old twins or none meanwhile.
func (t *deviceTransport) install(final bool) error {
	r := t.r
	if t.alloc == nil {
		return nil // the machine knows none: unreachable
	}
	form, err := commhook.FormOf(r.hook, r.dtypes[0])
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := t.buckets
	if form.Kind == commhook.OnHost {
		t.alloc = nil
	}
	t.buckets, t.layout = nil, nil
	r.mu.Unlock()
	if err := closeTwins(old); err != nil {
		return err
	}
	if form.Kind == commhook.OnHost {
		r.log.Info("reducer: the comm hook has no device-bucket form; buckets stay on the host",
			zap.String("hook", commhook.Name(r.hook)))
		return nil
	}
	twins, err := t.newTwins(final)
	if err != nil {
		return errors.Join(err, closeTwins(twins))
	}
	r.mu.Lock()
	t.kind, t.buckets, t.layout = form.Kind, twins, r.layout
	r.mu.Unlock()
	regs := map[string]int{}
	for _, d := range twins {
		regs[d.db.Registration()]++
	}
	r.log.Info("reducer: buckets in device memory", zap.Int("buckets", len(twins)), zap.Bool("final", final),
		zap.Stringer("wire_dtype", twins[0].scratch.Dtype), zap.Any("registration", regs))
	return nil
}

// newTwins allocates a device twin for every bucket of the current plan,
// in the wire dtype the hook asks for.
func (t *deviceTransport) newTwins(final bool) ([]*devBucket, error) {
	r := t.r
	var twins []*devBucket
	for b, bk := range r.layout.buckets {
		form, err := commhook.FormOf(r.hook, bk.Buffer.Dtype)
		if err != nil {
			return twins, err
		}
		db, err := t.alloc.NewDeviceBucket(r.iter.ctx, form.Wire, bk.Buffer.Len(), final)
		if err != nil {
			return twins, fmt.Errorf("reducer: allocating device bucket %d (%d bytes): %w", b, bk.Bytes(), err)
		}
		twins = append(twins, &devBucket{db: db, scratch: pg.NewTensor(form.Wire, bk.Buffer.Len()),
			uploaded: make([]bool, len(bk.Params)), onDevice: make([]bool, len(bk.Params))})
	}
	return twins, nil
}

// upload, from MarkReady of a synchronised iteration, sends parameter i's
// gradient to its device twin: the host bucket's view prepared for the
// wire, or the device gradient as it is.
func (t *deviceTransport) upload(i int) error {
	if !t.active() {
		return nil
	}
	r := t.r
	grad := r.dst[i]
	b, j := r.layout.bucketOf[i], r.layout.slotOf[i]
	d := t.buckets[b]
	if grad.IsDevice() && grad.Dtype == d.scratch.Dtype {
		d.onDevice[j], d.uploaded[j] = true, true
		return d.db.Upload(r.layout.buckets[b].Offsets[j], grad)
	}
	if grad.IsDevice() {
		return fmt.Errorf("%w: parameter %d (%s): device gradients with the %v compression hook; cast on the device or use "+
			"the allreduce hook", ErrBadGradient, i, r.params[i].Name, d.scratch.Dtype)
	}
	return t.uploadSlot(b, j)
}

// uploadSlot prepares slot j of bucket b from the host bucket and
// uploads it.
func (t *deviceTransport) uploadSlot(b, j int) error {
	d, bk := t.buckets[b], t.r.layout.buckets[b]
	off := bk.Offsets[j]
	src, wire := bk.View(j), d.scratch.Slice(off, off+bk.Lengths[j])
	if err := t.prepareWire(wire, src); err != nil {
		return err
	}
	d.uploaded[j] = true
	return d.db.Upload(off, wire)
}

// prepareWire is what the hook does to a gradient before communication:
// cast to the wire dtype and, for allreduce, divide by the world size, as
// commhook.Allreduce and the compression hooks do on the host.
func (t *deviceTransport) prepareWire(wire, src pg.Tensor) error {
	if err := backend.Convert(wire, src); err != nil {
		return err
	}
	if t.kind == commhook.DeviceAverage {
		return commhook.Divide(wire, t.r.g.Size())
	}
	return nil
}

// screen visits the host-held slots of bucket b for the NaN screening
// (Note [where the NaN began]). A slot whose gradient came from the device
// is stale on the host and skipped: fixDeviceSlots checks it. A slot the
// screening zeroed is uploaded again, since the twin may hold its bad
// values already.
func (t *deviceTransport) screen(b int, zero func(slot int) bool) error {
	if !t.active() {
		return t.host.screen(b, zero)
	}
	for j, dev := range t.buckets[b].onDevice {
		if dev || !zero(j) {
			continue
		}
		if err := t.uploadSlot(b, j); err != nil {
			return err
		}
	}
	return nil
}

// launch starts bucket b's communication: on its device twin, or through
// the comm hook on the host bucket.
func (t *deviceTransport) launch(b int, screen bool) pg.Work {
	if t.active() {
		return t.launchTwin(b, screen)
	}
	return t.host.launch(b, screen)
}

// launchTwin replaces the hook call for bucket b: the slots no gradient
// filled are uploaded, the bucket sealed, the allreduce issued on the
// device twin, and the Work returned completes when the result is back
// in the host bucket.
func (t *deviceTransport) launchTwin(b int, check bool) pg.Work {
	r := t.r
	d, bk := t.buckets[b], r.layout.buckets[b]
	ctx, g := r.iter.ctx, r.obs.hookGroup(r.g)
	fail := func(err error) pg.Work {
		return pg.Completed(fmt.Errorf("reducer: device bucket %d: %w", b, err))
	}
	if err := t.fixDeviceSlots(ctx, b, check); err != nil {
		return fail(err)
	}
	for j := range d.uploaded {
		if !d.uploaded[j] {
			if err := t.uploadSlot(b, j); err != nil {
				return fail(err)
			}
		}
	}
	clear(d.uploaded)
	clear(d.onDevice)
	if err := d.db.Seal(); err != nil {
		return fail(err)
	}
	var w pg.Work = pg.Completed(nil)
	if t.kind == commhook.DeviceAverage {
		w = g.AllReduce(ctx, d.db.Tensor(), pg.Op(pg.Sum))
	}
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		if err == nil {
			err = d.download(ctx, bk.Buffer)
		}
		f.Complete(err)
	}()
	return f
}

// fixDeviceSlots applies, for the allreduce hook, the division to the
// slots that came from device gradients: they go down to the host, are
// divided there and go up again (goddp runs no kernels of its own). With
// check, a slot holding a NaN or an infinity goes up as zeros instead
// (Note [where the NaN began]): the download is paid already.
func (t *deviceTransport) fixDeviceSlots(ctx context.Context, b int, check bool) error {
	r := t.r
	d, bk := t.buckets[b], r.layout.buckets[b]
	for j, dev := range d.onDevice {
		if !dev || t.kind != commhook.DeviceAverage {
			continue
		}
		off := bk.Offsets[j]
		wire := d.scratch.Slice(off, off+bk.Lengths[j])
		if err := d.db.Download(ctx, off, wire); err != nil {
			return err
		}
		if check && !Finite(wire) {
			clear(wire.Data)
			r.origin.note(bk.Params[j]) // origin.go
		}
		if err := commhook.Divide(wire, r.g.Size()); err != nil {
			return err
		}
		if err := d.db.Upload(off, wire); err != nil {
			return err
		}
	}
	return nil
}

// download brings the reduced twin back into the host bucket, once,
// casting back from the wire dtype.
func (d *devBucket) download(ctx context.Context, host pg.Tensor) error {
	if d.scratch.Dtype == host.Dtype {
		return d.db.Download(ctx, 0, host)
	}
	if err := d.db.Download(ctx, 0, d.scratch); err != nil {
		return err
	}
	return backend.Convert(host, d.scratch)
}

func (t *deviceTransport) result(i int) pg.Tensor { return t.host.result(i) }

// writeBack writes host gradients' results as the host path does, then
// device gradients' on the device.
func (t *deviceTransport) writeBack(ctx context.Context, globalUsed []int32) error {
	if err := t.host.writeBack(ctx, globalUsed); err != nil {
		return err
	}
	return t.writeDevice(ctx, globalUsed)
}

// writeDevice, from Finalize, writes results into the device gradients,
// on the device (host gradients got theirs from the host path).
func (t *deviceTransport) writeDevice(ctx context.Context, globalUsed []int32) error {
	r := t.r
	if t.alloc == nil {
		return nil // no device buckets, so no device gradients: MarkReady refused them
	}
	for i, dst := range r.dst {
		if !dst.IsDevice() || (globalUsed != nil && globalUsed[i] == 0) {
			continue
		}
		b, j := r.layout.bucketOf[i], r.layout.slotOf[i]
		d := t.buckets[b]
		var err error
		if d.scratch.Dtype == dst.Dtype {
			err = d.db.Download(ctx, r.layout.buckets[b].Offsets[j], dst)
		} else {
			err = errors.New("a compressed bucket cannot write a device gradient")
		}
		if err != nil {
			return fmt.Errorf("reducer: writing the result of parameter %d (%s) to the device: %w", i, r.params[i].Name, err)
		}
	}
	return nil
}

// registrations is DeviceBuckets' answer, with r.mu held.
func (t *deviceTransport) registrations() []string {
	if !t.active() {
		return nil
	}
	out := make([]string, len(t.buckets))
	for i, d := range t.buckets {
		out[i] = d.db.Registration()
	}
	return out
}

// close releases the twins, detaching them under r.mu first.
func (t *deviceTransport) close() error {
	t.r.mu.Lock()
	twins := t.buckets
	t.buckets, t.layout = nil, nil
	t.r.mu.Unlock()
	return closeTwins(twins)
}

// closeTwins releases device twins.
func closeTwins(twins []*devBucket) error {
	var errs []error
	for _, d := range twins {
		errs = append(errs, d.db.Close())
	}
	return errors.Join(errs...)
}
