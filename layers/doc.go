// Package layers holds neural-network layers as Gorgonia operations of
// goddp's own, for models trained with ddp.Wrap: convolution (Conv2d), max
// pooling (MaxPool2d), fully connected layers (Linear) and the activations
// (ReLU, Tanh). Their forward and backward passes run as matrix products
// on the layout each product needs (internal/gemm), with buffers allocated
// once per graph node and reused every step, so a training step allocates
// no tensors of its own.
//
// Each function adds one node to the graph of its inputs and returns it;
// gorgonia.Grad differentiates it with ops of this package. A node's value
// is overwritten by the machine's next run (Note [output buffers]): read
// what must outlive a step through gorgonia.Read, or copy it. One graph
// must not run on two machines at once. docs/layers.md shows how to build
// a model of one's own from them and train it with ddp.Wrap.
package layers
