// Package optim holds the optimizers ddp-train steps: torch 1.13's SGD
// (momentum, dampening, Nesterov, weight decay), Adam (coupled weight
// decay) and AdamW (decoupled), with PyTorch's update rules and defaults,
// working directly on parameter memory; and torch's learning-rate
// schedules (LinearLR, CosineAnnealingLR, StepLR, SequentialLR), stepped
// as torch steps them.
//
// New(name, lr, n) takes torch's defaults for everything but the rate;
// NewWith takes Options, named after torch's arguments, where a nil field
// is torch's default and Set(0) an explicit zero.
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
// # Schedules
//
// A Schedule gives the rate of the next step and moves on once after
// every optimizer step, by torch's recursive get_lr (the form
// scheduler.step() uses), so its rates are torch's to the last bit up to
// math.Cos:
//
//	sched, err := optim.NewSchedule(optim.Recipe{Kind: "cosine", LR: 1e-3, Steps: S, WarmupSteps: W})
//	for each step {
//		err = opt.SetLR(sched.LR())
//		err = opt.Step(ps, gs)
//		sched.Step()
//	}
//
// Schedule.State and Optimizer.State together checkpoint a run; loaded
// into fresh ones made the same way, the run continues bit for bit.
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
