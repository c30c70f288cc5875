// Package averaging averages model parameters across ranks, after torch's
// torch.distributed.algorithms.model_averaging: AverageParameters (utils'
// average_parameters), PeriodicModelAverager and HierarchicalModelAverager,
// with torch's semantics and defaults.
//
// With commhook.PostLocalSGD as the reducer's comm hook, they make
// post-local SGD: for the first WarmupSteps steps DDP averages gradients
// over every rank as usual; after that gradients are averaged only within
// each host (or not at all), each rank's optimizer steps on its own, and an
// averager averages the parameters over every rank every Period steps,
// after the optimizer step:
//
//	hook, _ := commhook.NewPostLocalSGD(ctx, g, commhook.PostLocalSGDOptions{StartLocalSGDIter: 100})
//	d, _ := ddp.Wrap(ctx, g, params, ddp.Options{Hook: hook})
//	avg, _ := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 4, WarmupSteps: 100})
//	for step := ... {
//		d.RunAll(ctx, vm)
//		opt.Step(values, grads)
//		avg.AverageParameters(ctx, values) // every 4th step after step 100
//	}
//
// Parameters are given as pg.Tensor views of the model's memory
// (gtensor.TensorOf, optim.NodeTensors), which are averaged in place. As torch
// averages only parameters that have a gradient, pass the parameters the
// optimizer steps. The package knows no autodiff engine.
package averaging
