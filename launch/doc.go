// Package launch starts the worker processes of a single-machine job, the
// way `torchrun --standalone` does: N copies of a program, each told its
// rank, the world size, the rendezvous address on loopback and a fresh
// per-job secret through the environment variables that pg/env reads.
// If any worker fails, the others are stopped and the error names the
// failed rank. RunElastic and SelfElastic add torchrun's --max_restarts:
// restart every worker, with backoff and a fresh rendezvous, when one
// fails; never after a signal. A launcher interrupted by SIGINT or
// SIGTERM forwards the signal to its workers (see Interrupted).
//
// It is internal because only cmd/ and bench/ programs launch processes.
package launch
