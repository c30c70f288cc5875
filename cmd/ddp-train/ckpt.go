package main

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/internal/checkpoint"
)

// saveCheckpoint writes the model, the optimizer state and the step
// (rank 0 only; every rank holds the same values), with every rank's
// comm hook state (see Note [comm hook state in checkpoints], hooks.go),
// which makes it collective.
func (t *trainer) saveCheckpoint(ctx context.Context, s *session, step int) error {
	hookState, err := gatherHookState(ctx, t.g, s.hook)
	if err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	if t.g.Rank() != 0 {
		return nil
	}
	ck := checkpoint.Capture(step, s.params, s.opt)
	ck.Extra = hookState
	ck.Meta = map[string]string{"comm_hook": hookLabel(t.c)}
	if err := checkpoint.Save(t.c.checkpointDir, ck); err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	return nil
}
