// Package dist joins a process to its distributed job and returns a ready
// process group: torch.distributed.init_process_group for goddp.
//
//	g, err := dist.InitProcessGroup(ctx, dist.Options{}) // the job the launcher started
//	if err != nil { ... }
//	defer g.Close()
//	// any engine's wrapper takes g: ddp.Wrap (Gorgonia), gomlxddp.New (GoMLX)
//
// InitProcessGroup reads the job from whichever launcher started the
// process (ddp-train, torchrun, mpirun, srun, Kubernetes, or package
// launch), meets the other ranks through a store and builds the backend's
// group: tcp, nccl or mpi (the last with -tags mpi). The same binary runs
// unchanged under each launcher.
//
// dist imports no autodiff engine, so a program that trains with GoMLX, or
// only moves tensors between processes, links neither Gorgonia nor GoMLX
// through it. It sits above the backends (pg/tcp, pg/nccl, pg/mpi) and the
// rendezvous (pg/env, pg/store), and below every engine's wrapper.
package dist
