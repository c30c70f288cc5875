package main

import (
	"fmt"

	"github.com/goddp/ddp/internal/checkpoint"
)

// saveCheckpoint writes the model, the optimizer state and the step
// (rank 0 only; every rank holds the same values).
func (t *trainer) saveCheckpoint(s *session, step int) error {
	if t.g.Rank() != 0 {
		return nil
	}
	if err := checkpoint.Save(t.c.checkpointDir, checkpoint.Capture(step, s.params, s.opt)); err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	return nil
}
