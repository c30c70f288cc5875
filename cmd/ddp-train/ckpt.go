package main

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/internal/checkpoint"
	"go.uber.org/zap"
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
	if err := checkpoint.SaveWith(t.c.checkpointDir, ck, t.checkpointOptions()); err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	return nil
}

// checkpointOptions are --checkpoint-keep's, with the rank's logger for
// the warnings of a fallback past a damaged checkpoint.
func (t *trainer) checkpointOptions() checkpoint.Options {
	return checkpoint.Options{Keep: t.c.checkpointKeep, Logger: t.log}
}

// loadCheckpoint reads --checkpoint for --resume: the newest intact
// checkpoint (see checkpoint.LoadWith), every file verified.
func (t *trainer) loadCheckpoint() (*checkpoint.Checkpoint, error) {
	ck, from, err := checkpoint.LoadWith(t.c.checkpointDir, t.checkpointOptions())
	if err != nil {
		return nil, err
	}
	t.log.Info("checkpoint loaded", zap.Int("rank", t.g.Rank()), zap.String("checkpoint", from), zap.Int("step", ck.Step))
	return ck, nil
}
