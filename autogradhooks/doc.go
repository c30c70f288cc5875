// Package autogradhooks tells a DDP reducer the moment each parameter's
// gradient exists during Gorgonia's backward pass, so its allreduce can start
// while the rest of backward is still running. It is the Gorgonia counterpart
// of the autograd hooks PyTorch's Reducer registers on each parameter.
//
// # Use
//
//	hooks, err := autogradhooks.New(params, func(i int, grad gorgonia.Value) error {
//		reducer.MarkReady(i, grad) // must not block
//		return nil
//	})
//	h1, err := gorgonia.Mul(x, hooks.Node(0)) // hooks.Node(i) where params[i] is used
//	...
//	grads, unused, err := hooks.Grad(cost)    // gorgonia.Grad on the used params
//	vm := gorgonia.NewTapeMachine(g)          // no BindDualValues
//	for each step {
//		gorgonia.Let(x, batch)
//		err := autogradhooks.RunAll(vm)       // hooks fire in here, last layer first
//		// wait for the reducer; it writes averages into params[i].Grad() in place
//		solver.Step(gorgonia.NodesToValueGrads(params))
//		vm.Reset()
//	}
//
// Unused lists the parameters the cost does not reach through differentiable
// ops. Their hooks never fire, and gorgonia.Grad refuses them, so Grad (or
// Set.Grad) differentiates only the others; DDP marks the unused ones ready
// at the start of backward. An unused parameter has no gradient node, and
// Gorgonia's solvers fail on it, so step only the used ones.
//
// # Why an identity op
//
// Gorgonia has no hooks. A hook op applied to a gradient node after
// gorgonia.Grad returns does run, but only after the whole backward pass:
// Compile orders the tape by a depth-first walk that visits nodes in
// ascending ID, and since every node's inputs are older than the node, the
// tape runs nodes exactly in creation order. A node created after Grad is
// newer than every backward node.
//
// So the hook node has to be created inside Grad, at the right moment.
// Backpropagate walks the graph in descending ID and calls each op's
// SymDiff. New therefore gives each parameter an identity op (ParamHook)
// whose SymDiff wraps the incoming gradient in a second identity op
// (GradHook) that calls the Func. Grad runs that SymDiff when its walk
// reaches the wrapper, which creates the GradHook node among the backward
// nodes of that layer, and the tape runs it right after the gradient it
// reads. Backpropagate makes the GradHook node the raw parameter's
// gradient, so params[i].Grad() is the same Value the Func was handed.
//
// # Note [creation order]
//
// The same rule fixes where the wrapper must be created. The walk reaches a
// wrapper after every node created later than it. A wrapper created right
// before its first use puts its hook right after its gradient. Wrappers
// created before the forward graph (say, all of them up front) put every
// hook after the whole backward pass. That is why Set.Node creates the
// wrapper on first call, and why a model should call hooks.Node(i) where it
// uses params[i], layer by layer. Set.Nodes creates all the missing ones at
// once.
//
// # Contract
//
//   - The Func runs on RunAll's goroutine, inside the backward pass, which
//     waits for it. It must not block: hand (idx, grad) to another goroutine
//     and return. It must not panic. Gorgonia runs the tape on a goroutine of
//     its own, where a panic would kill the process, so the hook op recovers
//     a panic and turns it into a HookError wrapping ErrHookPanic.
//   - grad is the VM's own Value, not a copy: it is params[i].Grad(). It
//     stays valid until the next Reset (Reset drops the registers; the VM
//     never writes this one again in the same run). Solver.Step scales and
//     zeroes it in place, so communication must finish before Step.
//   - Two parameters' grad can be one Value: Gorgonia hash-conses identical
//     gradient expressions into one node (two heads of one shape on one
//     input, summed). A Func that writes a different result into each
//     must give all but one memory of their own: SharedGradients lists
//     the groups once per graph, and a PlaceFunc can return the copy.
//   - Do not use gorgonia.BindDualValues. With it, params[i].Grad() is a
//     separate tensor that accumulates across runs, and the VM adds grad
//     into it as soon as the Func returns. Writes into grad after that are
//     lost, and a goroutine still reading grad races with the VM.
//   - Call vm.Reset() between runs. Without it, RunAll silently does
//     nothing.
//   - A TapeMachine is not safe for concurrent use: use one per goroutine.
//     Several machines on separate graphs may run at once.
//   - Build graphs serially (or under a lock). Gorgonia's graph construction
//     has a data race on a package-level counter (internal/encoding.NewGroup,
//     used by Rectify, Conv2d, MaxPool2D), and a Set is not safe for
//     concurrent use.
//   - Gorgonia's TapeMachine wraps errors in a type without Unwrap. Run the
//     machine with RunAll to reach a Func's error with errors.Is or
//     errors.As.
//   - With gorgonia.CompileFunction, pass the gradient nodes (which are the
//     hook nodes) as outputs, or the hooks are pruned.
//   - NewPlacing takes a PlaceFunc instead, which may return a Value of the
//     gradient's dtype and shape that stands for the gradient from then on
//     (the hook node's output, so params[i].Grad()). DDP's
//     GradientAsBucketView copies each gradient into bucket memory this
//     way: Gorgonia computes every op's result into memory of its own, so
//     moving it is the most a caller can do.
package autogradhooks
