package ddp

import (
	"context"

	"github.com/goddp/ddp/dist"
)

// InitOptions configure InitProcessGroup; they are dist.Options, which new
// code names directly.
type InitOptions = dist.Options

// Group is a process group that InitProcessGroup joined; it is dist.Group,
// which new code names directly.
type Group = dist.Group

// ErrBackendUnavailable is dist.ErrBackendUnavailable, which new code
// matches directly: errors.Is finds either, since they are one value.
var ErrBackendUnavailable = dist.ErrBackendUnavailable

// InitProcessGroup calls dist.InitProcessGroup, which new code calls
// directly: dist imports no autodiff engine, so a program that does not
// train with Gorgonia joins its job without linking it.
func InitProcessGroup(ctx context.Context, o InitOptions) (*Group, error) {
	return dist.InitProcessGroup(ctx, o)
}
