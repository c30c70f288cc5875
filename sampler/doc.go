// Package sampler splits a data set among the ranks of a job the way
// PyTorch's DistributedSampler(drop_last=False) does, and cuts each rank's
// share into batches the way a DataLoader with drop_last=False does.
//
// For N samples and W ranks, each epoch:
//
//   - the index list is 0..N-1, or a permutation of it when shuffling;
//   - it is padded to total = ceil(N/W)·W by wrapping around to its start,
//     as many times as needed (when N < W a sample repeats more than once);
//   - rank r takes indices[r], indices[r+W], indices[r+2W], …, which is
//     NumSamples = ceil(N/W) indices;
//   - Batches cuts them into consecutive batches; the last may be short.
//
// With shuffle off, the result is exactly torch's. With shuffle on, the
// permutation is seeded by (seed, epoch) like torch's (which seeds a
// torch.Generator with seed+epoch), but it comes from math/rand/v2's PCG
// seeded with (uint64(seed), uint64(epoch)), so it is not the permutation
// torch draws. Every rank computes the same permutation from the same
// seed, so the ranks' shares are disjoint apart from the padding.
//
//	s, err := sampler.New(n, world, rank, shuffle, seed)
//	for epoch := 0; ; epoch++ {
//		for _, batch := range sampler.Batches(s.Indices(epoch), batchSize) {
//			ds.Gather(batch, x, y) // train on the batch
//		}
//	}
package sampler
