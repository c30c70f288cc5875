// Command train is a complete data-parallel training program that uses
// only goddp's public packages, as a program outside this module would:
// a Gorgonia MLP wrapped with ddp.Wrap, the data set from package dataset,
// each rank's share of it from sampler (torch's DistributedSampler), an
// optimizer from optim, and a checkpoint from checkpoint.
//
//	go run ./examples/train --nproc 2 --steps 200 --checkpoint /tmp/ckpt
//
// Its ranks are goroutines over the in-process backend (pg/local), so it
// runs anywhere. Across processes and machines, join the job with
// dist.InitProcessGroup and run one process per rank, as examples/multiproc
// does: the training code is the same.
package main
