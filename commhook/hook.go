package commhook

import (
	"context"

	"github.com/goddp/ddp/pg"
)

// ParamView names one parameter's gradient inside a bucket's buffer.
type ParamView struct {
	Index  int    // the parameter's index in the model
	Name   string // its name, e.g. "fc1.weight"
	Shape  []int  // its shape
	Offset int    // first element in the bucket's buffer
	Len    int    // number of elements
}

// GradBucket is what a hook receives: one bucket of gradients.
type GradBucket struct {
	Index  int         // the bucket's position in launch order
	Buffer pg.Tensor   // the flat buffer, this rank's gradients on entry
	Params []ParamView // the parameters in the buffer, in buffer order
	IsLast bool        // whether this is the iteration's last bucket
	// Divisor, when positive, is what Allreduce divides by instead of the
	// group's size: the number of ranks still training under a Join that
	// does not divide by the initial world size (c10d's div_factor, which,
	// as in torch, only the default allreduce honours).
	Divisor int
}

// Gradient returns the part of the buffer holding Params[j].
func (b *GradBucket) Gradient(j int) pg.Tensor {
	p := b.Params[j]
	return b.Buffer.Slice(p.Offset, p.Offset+p.Len)
}

// Hook communicates one bucket. See the package documentation for the
// contract. ctx bounds the communication it starts.
type Hook interface {
	Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work
}

// HookFunc adapts a function to the Hook interface.
type HookFunc func(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work

// Run calls f.
func (f HookFunc) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	return f(ctx, g, b)
}

// Namer is implemented by hooks that have a name for logs and metrics.
type Namer interface {
	Name() string
}

// Name returns h's name, or "custom" for a hook without one.
func Name(h Hook) string {
	if n, ok := h.(Namer); ok {
		return n.Name()
	}
	return "custom"
}
