// Command gomlx trains a GoMLX MLP data-parallel, one rank per process,
// with goddp's GoMLX engine (engines/gomlxddp): the counterpart of
// examples/train, on the same synthetic data set (package dataset), each
// rank's share of every global batch from sampler (torch's
// DistributedSampler), GoMLX's Adam or SGD, and a GoMLX checkpoint.
//
//	go run ./examples/gomlx --nproc 2 --steps 200 --checkpoint /tmp/gomlx-ckpt
//
// With --nproc N it launches N copies of itself on this machine, as
// ddp-train --nproc and torchrun --standalone do (package launch),
// and each joins the job with dist.InitProcessGroup over tcp. A copy
// started by any other launcher (torchrun, mpirun with MASTER_ADDR, srun)
// with GODDP_GOMLX_WORKER=1 in its environment is a worker and joins the
// same way. Rank 0 prints the losses, the test accuracy and a digest of
// the final parameters; every rank checks that its parameters have the
// same bits as rank 0's.
//
// With --checkpoint, rank 0 loads the latest checkpoint in the directory
// (if any) before training, which DDP then copies to every rank, and
// saves one at the end.
package main
