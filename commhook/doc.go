// Package commhook defines how a bucket of gradients is communicated: the
// Hook interface the reducer calls once per bucket per iteration, the
// GradBucket it is given, and the built-in hooks.
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
//     every rank in the same order, so the collectives they issue line up.
//
// A plain function becomes a Hook with HookFunc.
package commhook
