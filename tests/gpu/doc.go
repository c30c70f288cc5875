// Package gpu checks DDP on a real GPU: on a world-size-1 pg/nccl group,
// whose buckets live in device memory (registered as the loaded NCCL
// allows), the branch model (package testmodel, whose heads' gradients
// Gorgonia shares) steps the plain reference's gradients, and both it and
// the root's MLP end bitwise equal to the same run on pg/local.
//
//	go test -v ./tests/gpu
//
// Every test skips without a GPU or without NCCL (GODDP_NCCL_LIBRARY
// names the library; otherwise it is looked for beside PyTorch's and the
// system's). libnccl/testdata/gpu/build.sh builds it as .gpu/ddp.test for a
// GPU machine, and run.sh runs it there, writing the NCCL run's reducer
// timeline to GODDP_GPU_OUT. The package holds tests only, so it has no
// Example.
package gpu
