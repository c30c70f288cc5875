// Package diloco trains across slow links with DiLoCo (Douillard et al.
// 2023, arXiv 2311.08105) and Streaming DiLoCo (arXiv 2501.18512): each
// rank takes H inner optimizer steps on its own batches with no
// communication, then the fragments' pseudo-gradients (global minus local
// parameters) are averaged over the ranks and an outer SGD with Nesterov
// momentum steps the global parameters, from which every rank continues.
// It communicates once per H steps instead of once per step.
//
// The options and their defaults follow the paper and OpenDiLoCo (outer
// rate 0.7, momentum 0.9, Nesterov); the fragment schedule, the delay and
// the mixing follow torchft's DiLoCo (meta-pytorch/torchft,
// torchft/local_sgd.py). Note [DiLoCo step by step] in diloco.go says
// what happens at each inner step.
//
//	d, _ := diloco.New(g, params, diloco.Options{SyncEvery: 50})
//	for step := ... {
//		// forward and backward with no gradient communication
//		inner.Step(params, grads)
//		d.Step(ctx, params) // every 50th step: the outer step
//	}
//
// The package knows the process group and package optim, and no autodiff
// engine beyond what optim imports.
package diloco
