// Package bucket plans how a model's parameters are grouped for gradient
// communication, and holds each group's flat buffer.
//
// AssignBySize is PyTorch's compute_bucket_assignment_by_size: the same
// input gives the same buckets. Parameters are grouped by dtype and
// device; each group fills a bucket until its size reaches the current
// limit, and the parameter that reaches it closes the bucket. The limits
// are walked with a cursor per group, and the last one repeats, which is
// how DDP makes its first bucket small (1 MiB) so the first allreduce
// starts early, and the rest large (25 MiB). A parameter that expects a
// sparse gradient always sits alone, with limit 0.
//
// A Bucket is one contiguous buffer holding the gradients of its
// parameters back to back, so one collective reduces them all; Views gives
// each parameter's slice of it.
package bucket
