// Package optim holds the optimizers ddp-train steps: SGD, SGD with
// momentum and Adam, with PyTorch's update rules and defaults, working
// directly on parameter memory.
//
// Gorgonia's solvers keep their state unexported, so a checkpoint could
// not capture it; these keep all of it in a State that Load restores
// exactly, so a resumed run continues bit for bit.
//
// # Use with DDP
//
//	opt, err := optim.New("adam", 1e-3, len(params))
//	for each step {
//		net.Feed(spec, x, labels)
//		err = d.RunAll(ctx, vm) // every gradient now holds the average over ranks
//		ps, gs, err := d.StepTensors() // every parameter, used here or not
//		err = opt.Step(ps, gs)         // the same update on every rank
//		vm.Reset()
//	}
//
// Step never writes the gradients, and it divides by nothing: DDP has
// already averaged them, and the loss is already a mean over the batch.
// Every rank holds the same gradients and the same state, so every rank
// computes bitwise the same parameters.
//
// # Exactness
//
// The updates follow PyTorch's single-tensor code paths (the ones it takes
// for CPU tensors), operation by operation, in the parameter's dtype; see
// New for the defaults and the sgd and adam types for the formulas. Each
// multiplication is rounded before the addition that follows it (Go may
// otherwise fuse them into one FMA on some CPUs), so results do not depend
// on the CPU. PyTorch's vectorised CPU kernels may use FMA, so the two can
// differ in the last bit of an update.
//
// # Gradient clipping
//
// ClipGradNorm (torch's clip_grad_norm_) and ClipGradValue
// (clip_grad_value_) clip the gradients in place; with DDP, call them on
// StepTensors' gradients after RunAll and before Step. They are
// deterministic, so every rank clips its identical averaged gradients
// identically, and they match torch 1.13's arithmetic (Note [clip
// arithmetic] in clipnorm.go).
package optim
