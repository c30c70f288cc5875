// Package reducer is goddp's gradient reducer, after c10d's Reducer: it
// groups a model's parameters into size-capped buckets, takes each
// gradient as backward produces it, and launches a bucket's communication
// as soon as the bucket is complete and every earlier bucket has
// launched, so communication overlaps the rest of backward.
//
// Defaults are DDP's: a 25 MiB bucket cap, a 1 MiB first bucket, and
// parameters in reverse order (gradients arrive last layer first). When
// buckets will be rebuilt (FindUnusedParameters off, or StaticGraph on),
// the first iteration uses a single bucket per dtype, records the order
// in which gradients become ready, and the buckets are rebuilt in rank 0's
// recorded order before the next iteration. Once per run.
//
// Averaging belongs to the comm hook (package commhook): the reducer only
// copies gradients into buckets, calls the hook, and writes back what the
// hook produced. The default hook divides by the world size and sums.
//
// The reducer is driven from outside, one iteration at a time:
//
//	r, err := reducer.New(ctx, group, params, reducer.Options{})
//	for step := ... {
//		r.Prepare(ctx, reducer.Iteration{Sync: true})
//		// backward: each gradient hook calls r.MarkReady(i, grad)
//		r.Finalize(ctx) // grads now hold the average over ranks
//		// optimizer step
//	}
//
// With GradientAsBucketView an engine writes each gradient into its
// bucket (GradientBuffer) and MarkReady and Finalize copy nothing; with
// MixedPrecision, float16 or bfloat16 gradients of float32 parameters are
// reduced in a chosen dtype and come back, in the parameters' dtype, from
// Gradient. docs/reducer.md describes both.
//
// Its decisions (which parameter is ready, which bucket launches next,
// when to rebuild, what an iteration reports) are a plain state machine
// with one entry, step(event), whose scenarios are the scripts in
// testdata/ (Note [events in, actions out] in machine.go). For Gorgonia models, Wrap does all of this: it installs the
// gradient hooks (package autogradhooks), finds unused parameters, syncs
// the initial values from rank 0 and drives the reducer.
//
// Errors carry the substance of torch's: a parameter that got no gradient
// is named, with advice; a gradient marked twice is named; a gradient of
// the wrong dtype or size is refused; ranks with different models fail
// at construction, naming the rank and parameter. After a fatal error
// every call returns it.
//
// Device buckets: on a group that implements backend.DeviceBucketAllocator (an
// NCCL group) each bucket has a twin in device memory; gradients are
// uploaded to it on a copy stream as they become ready, the allreduce
// runs on it after the copies (on the device), and the result comes back
// once per bucket. MarkReady also accepts device gradients there.
// Options.HostBuckets turns this off; Close releases the twins. See Note
// [device buckets] in device.go and docs/nccl.md.
package reducer
