// Package launch starts the worker processes of a single-machine job, the
// way `torchrun --standalone` does: N copies of a program, each told its
// rank, the world size, the rendezvous address on loopback and a fresh
// per-job secret through the environment variables that pg/env reads.
// If any worker fails, the others are stopped and the error names the
// failed rank.
//
// It is internal because only cmd/ and bench/ programs launch processes.
package launch
