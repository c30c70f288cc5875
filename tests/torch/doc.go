// Package torch checks goddp against PyTorch itself: the branch model
// (package testmodel) trains under torch's DistributedDataParallel (gloo,
// two processes, testdata/torch_branch_ddp.py) and under goddp from the
// same parameters on the same batches, with find_unused_parameters and
// with static_graph, and every parameter of every rank must match torch's.
//
//	go test ./tests/torch
//
// It skips when /usr/bin/python3 has no torch: `apt-get install
// python3-torch` (Debian's 1.13), which scripts/test.sh does in CI with
// GODDP_TEST_INSTALL=1. The package holds tests only, so it has no Example.
package torch
