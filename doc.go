// Package ddp is goddp's front door: it wraps a Gorgonia model for
// data-parallel training, as PyTorch's DistributedDataParallel wraps a
// module.
//
//	group, err := dist.InitProcessGroup(ctx, dist.Options{}) // the job the launcher started
//	defer group.Close()
//	d, err := ddp.Wrap(ctx, group, params, ddp.Options{})
//	// build the forward graph with d.Node(i) wherever params[i] is used
//	grads, err := d.Grad(cost)
//	vm := gorgonia.NewTapeMachine(g)
//	for step := ... {
//		err := d.RunAll(ctx, vm)   // forward, backward, averaged gradients
//		solver.Step(d.ValueGrads())
//		vm.Reset()
//	}
//
// dist.InitProcessGroup is torch.distributed.init_process_group: it reads
// the job from whichever launcher started the process (ddp-train, torchrun,
// mpirun, srun, Kubernetes), meets the other ranks and returns a ready
// process group (tcp, nccl or mpi). It lives in package dist, which imports
// no engine; InitProcessGroup, InitOptions and Group here forward to it for
// Gorgonia programs written before. Any pg.ProcessGroup works with Wrap,
// the in-process pg/local included.
//
// Wrap checks that every rank holds the same model, copies rank 0's
// parameter values to every rank, and installs gradient-ready hooks
// (package autogradhooks) that feed the engine-agnostic reducer (package
// reducer) while Gorgonia's tape machine is still running backward, so
// each bucket's allreduce overlaps the rest of backward.
//
// The reducer, the bucket planner and the comm hooks know nothing of
// Gorgonia: any engine that can hand over each gradient as it becomes ready
// drives reducer.Reducer directly. Options is the reducer's; docs/reducer.md
// lists every option beside torch DDP's.
package ddp

import "github.com/goddp/ddp/reducer"

// Options configures Wrap: the reducer's options (bucket sizes, unused
// parameters, static graph, comm hook, logger, metrics, timeline). The
// zero value gives DDP's defaults.
type Options = reducer.Options
