// Package model is a small zoo of Gorgonia models for data-parallel
// training: an MLP and a small LeNet-like CNN, with PyTorch's parameter
// layout and initialisation, the mean softmax cross-entropy loss, and .npy
// import and export of the parameters. They are the models ddp-train
// trains, and a program of one's own can train them with ddp.Wrap or with
// plain Gorgonia; the Example trains one without DDP.
//
// # Two phases
//
// DDP's gradient hooks must be created where each parameter is used, layer
// by layer (see autogradhooks, Note [creation order]), and ddp.Wrap
// needs the parameters before the forward graph exists. So a model is
// built in two steps: NewParams makes the graph and the parameters, and
// Forward adds the forward graph and the loss, asking for each parameter
// where its layer uses it.
//
//	p, err := model.NewParams(spec, seed) // same seed on every rank
//	err = p.LoadNPY(dir)                  // optional: --init
//	d, err := ddp.Wrap(ctx, group, p.Nodes, opts)
//	net, err := p.Forward(spec, d.Node)   // or nil for plain training
//	_, err = d.Grad(net.Loss)             // or gorgonia.Grad(net.Loss, p.Nodes...)
//	vm := gorgonia.NewTapeMachine(p.Graph)
//	opt, err := optim.New("sgd", lr, p.Len())
//	for each step {
//		err = net.Feed(spec, x, labels) // n <= spec.Batch rows
//		err = d.RunAll(ctx, vm)         // or vm.RunAll()
//		loss, right := net.LossValue(), net.Correct(labels)
//		ps, gs, err := optim.NodeTensors(p.Nodes)
//		err = opt.Step(ps, gs)
//		vm.Reset()
//	}
//	err = p.SaveNPY(out) // rank 0: --save
//
// Compile the whole graph (gorgonia.NewTapeMachine(p.Graph)): LossValue,
// LogitsValue and Correct read copies that Read nodes take during the
// forward pass, and gorgonia.CompileFunction would prune them. Don't use
// gorgonia.BindDualValues.
//
// # Models
//
// The MLP flattens each sample to D = prod(InputShape) values and applies
// fully connected layers D → Hidden[0] → … → Classes, the activation (relu
// or tanh) between them and none after the last. Layer l has fc<l>.weight
// [in, out] (the transpose of PyTorch's nn.Linear weight) and fc<l>.bias
// [out], computing x·W + b.
//
// The CNN is LeNet-5 for a [C, H, W] input (H, W >= 12), the activation
// after each convolution and hidden linear layer:
//
//	conv1  5×5, C → 6, padding 2, stride 1   [6, H, W]       conv1.weight [6,C,5,5], conv1.bias [6]
//	pool   2×2, stride 2                     [6, H/2, W/2]
//	conv2  5×5, 6 → 16, no padding           [16, H/2−4, W/2−4]  conv2.weight [16,6,5,5], conv2.bias [16]
//	pool   2×2, stride 2                     [16, h, w]      (5×5 for 28×28; sizes floor)
//	flatten (channel-major, as torch.flatten) → fc1 16·h·w → 120 → fc2 84 → fc3 Classes
//
// Hidden does not apply to it. Convolution weights have PyTorch's layout.
//
// Both are built from package layers' ops (Linear, Conv2d, MaxPool2d,
// ReLU, Tanh), which reuse their buffers every step: a node's value is
// overwritten by the machine's next run, so LossValue, LogitsValue and
// Correct read copies taken during the forward pass.
//
// Every weight and bias starts uniform in [−1/√fan_in, 1/√fan_in), as
// PyTorch's nn.Linear and nn.Conv2d defaults, fan_in being a linear
// layer's inputs or C·5·5; parameter i draws from the PCG stream
// (seed, i), so the values depend only on the seed and the architecture.
//
// # Model cards
//
// Spec.Card describes a model completely, layers included, as JSON that
// SaveNPYCard writes beside the parameters (CardFile) and ReadCard and
// SpecFromCard read back, so that a saved model loads, here or in
// PyTorch (docs/model-card.md), without guessing: Note [model cards].
//
// # Loss
//
// Loss is Σ_i W_i·CE_i over the batch's rows, CE_i being the softmax
// cross-entropy of row i: with W_i = 1/n on the n real rows and 0 on
// padding rows, it is PyTorch's CrossEntropyLoss (mean) over the real
// rows, and padding rows add exactly zero to the loss and the gradients.
// It is computed by one op that follows PyTorch's log_softmax and
// nll_loss formulas (Note [cross-entropy op]); Gorgonia's own softmax
// overflows on rows whose logits are far apart.
//
// # Concurrency
//
// Gorgonia's graph construction is not safe for concurrent use (it has a
// data race on a package-level counter), so NewParams and Forward, and
// DDP.Grad and NewTapeMachine after them, must not run at the same time as
// any other graph construction in the process: with the local backend's
// replicas as goroutines, hold one mutex around them (not around
// ddp.Wrap, which is collective). Running several machines at once,
// each on its own graph, is safe. A Params and its Net belong to one
// goroutine.
package model
