// Package replicas is the suite that hunts the ways DDP's replicas drift
// apart silently: two parameters whose gradients Gorgonia hash-conses into
// one node and so one memory, and parameters a rank's graph does not reach.
// Each rank builds its own head of the branch model (package testmodel)
// and trains it on pg/local, pg/tcp or pg/nccl over the NCCL test double,
// with every built-in comm hook, under Join and gradient accumulation; the
// gradients the documented loop steps must match a plain reference (each
// rank's gradients by Gorgonia alone, averaged over ranks) and stay bitwise
// equal across ranks, and so must the parameters after every step.
//
//	go test ./tests/replicas
//
// The package holds tests only, so it has no Example.
package replicas
