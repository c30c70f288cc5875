// Package commhook defines how a bucket of gradients is communicated: the
// Hook interface the reducer calls once per bucket per iteration, the
// GradBucket it is given, and the built-in hooks, after torch's
// ddp_comm_hooks.
//
// The contract, after PyTorch's register_comm_hook:
//   - The reducer fills the bucket's flat buffer with this rank's
//     gradients, not divided by anything. Averaging belongs to the hook:
//     the reducer never divides.
//   - The hook starts the communication and returns at once with a
//     pg.Work. When that Work has finished without error, the bucket's
//     buffer holds the bucket's new content (for Allreduce, the average
//     over ranks). The hook may write the buffer in place or copy into it.
//   - A hook runs on the goroutine that computes gradients, in the middle
//     of backward, so it must not block: start collectives and return.
//   - Hooks for one reducer run in bucket order, one bucket at a time, on
//     every rank in the same order, so the collectives they issue inside
//     Run line up. A hook that issues collectives later, from a goroutine
//     (PowerSGD sends Q once the sum of P is back), must keep them in
//     bucket order itself (see Note [issue order across buckets]); the
//     reducer issues none of its own until every bucket's Work is done.
//   - A hook may keep state across iterations (PowerSGD's error
//     feedback); it then serves one reducer on one rank, and implements
//     Stateful so that checkpoints carry it.
//
// A plain function becomes a Hook with HookFunc.
//
// # Built-in hooks
//
//   - Allreduce: torch's allreduce_hook, the default. Noop: no
//     communication, for measuring.
//   - FP16Compress, BF16Compress: torch's fp16_compress_hook and
//     bf16_compress_hook, half the bytes. Compress(dtype, h) runs any
//     hook on a converted copy of the bucket (fp16_compress_wrapper).
//   - PowerSGD, BatchedPowerSGD: torch's powerSGD_hook and
//     batched_powerSGD_hook, low-rank compression with error feedback;
//     options and defaults as torch's PowerSGDState.
//   - Hierarchical, Adasum: from Horovod. Hierarchical reduces within each
//     host, allreduces between one leader per host, and broadcasts back;
//     Adasum combines gradients pairwise by Horovod's adaptive summation.
//   - PostLocalSGD: torch's post_localSGD_hook, for post-local SGD with a
//     model averager from package averaging.
//
// docs/comm-hooks.md says when each pays off, with measurements, and
// how to write a hook of your own.
package commhook
