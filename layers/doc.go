// Package layers holds neural-network layers as Gorgonia operations of
// goddp's own, for models trained with ddp.Wrap: convolution, max pooling,
// fully connected layers and the activations. Their forward and backward
// passes run as matrix products on the layout each product needs
// (internal/gemm), with buffers allocated once per graph node and reused
// every step, so a training step allocates no tensors of its own.
package layers
