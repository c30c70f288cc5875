// Package scalemodel predicts a data-parallel training step on a cluster before
// one is rented: from a model's measured compute profile (forward,
// backward, each bucket's ready time and size, as ddp-train --timeline
// records them) and a cluster (hosts, ranks per host, link bandwidth and
// latency between and within hosts), it gives the step time, the share of
// communication hidden behind backward, and the scaling efficiency, for
// each allreduce algorithm and comm hook goddp has.
//
// It is the α–β (latency–bandwidth) model of Hockney, applied the way
// goddp's code runs:
//
//   - A bucket's communication is the comm hook's collectives
//     (Hook.Collectives): Allreduce sends the bucket; FP16 and BF16 half of
//     it; PowerSGD with rank r sends, per compressed n×m matrix, P (n·r)
//     and then Q (m·r) in two allreduces, the second after the first, and
//     the uncompressed tensors (1-D ones always) in a third.
//   - Collectives run one at a time, in order, on one stream (pg/tcp's
//     executor, Note [one collective at a time]); a bucket's first starts
//     at the later of its ready time and the end of the previous bucket's
//     last, since buckets launch strictly in index order.
//   - An allreduce of S bytes is a sequence of rounds. In each round every
//     rank sends to one peer; a round costs the latency of the slowest link
//     it uses plus the most bytes any host sends or receives over its
//     inter-host link (or any rank over its intra-host one) divided by
//     that link's bandwidth. Ring: 2(p−1) rounds of S/p. Recursive
//     doubling: lg p' rounds of S (p' the largest power of two ≤ p), plus
//     a fold-in and a hand-back round of S for the p−p' extra ranks.
//     Hierarchical: a binomial reduce to each host's leader, an allreduce
//     between the leaders, a binomial broadcast back. Auto is what pg/tcp's
//     AllReduce picks: hierarchical when the group spans several hosts
//     with several ranks each and shared memory is on, else doubling below
//     256 KiB and the ring from there.
//   - step = forward + max(backward end, last collective's end) + other
//     (optimizer, data, copies back: measured, not modelled); hidden share
//     = 1 − exposed/total communication, exposed = step − compute-only
//     step; scaling efficiency = compute-only step / step (weak scaling:
//     a fixed batch per rank).
//   - DiLoCo (PredictDiLoCo; package diloco) is compute-only inner steps
//     and, every H steps, one allreduce per fragment of its share of the
//     pseudo-gradients (in the quantised width), of which the next τ
//     inner steps' compute hides up to τ·compute; the bytes per step fall
//     as 1/H, and AllReduceTraffic says what they put on each link.
//
// What it leaves out, on purpose, is listed in docs/scaling.md: the time
// to add received data (a memory-bandwidth cost, small against a
// network's), the CPU time of compression (PowerSGD's matrix products and
// orthogonalization, fp16 casts), contention between communication and
// compute for cores, congestion beyond a host's own link (a full-bisection
// network is assumed), and stragglers.
package scalemodel
