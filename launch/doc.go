// Package launch starts the worker processes of a single-machine job, as
// torch.multiprocessing.spawn and `torchrun --standalone` do: N copies of
// a program, each told its rank, the world size, the rendezvous address on
// loopback and a fresh per-job secret through the environment variables
// that pg/env reads, so that each worker joins with dist.InitProcessGroup
// and no options.
//
//	if os.Getenv("MYPROG_WORKER") == "1" { // a worker: join, train, exit
//		g, err := dist.InitProcessGroup(ctx, dist.Options{})
//		...
//	}
//	err := launch.Self(ctx, 4, os.Args[1:], "MYPROG_WORKER=1", os.Stdout, os.Stderr)
//
// Self starts copies of the running program; Run starts any program from a
// Spec. If any worker fails, the others are stopped and the error (a
// *WorkerError) names the failed rank. RunElastic and SelfElastic add
// torchrun's --max_restarts: they restart every worker, with backoff and a
// fresh rendezvous, when one fails, never after a signal. A launcher
// interrupted by SIGINT or SIGTERM forwards the signal to its workers (see
// Interrupted). Loopback is the job that bench/ programs run over tcp.
//
// launch imports no autodiff engine (it joins through package dist), so a
// GoMLX program that launches its own workers links no Gorgonia. Across
// hosts, use a launcher that starts one process per rank on each (ddp-train
// --nnodes, torchrun, mpirun, srun; see docs/multi-host.md).
package launch
