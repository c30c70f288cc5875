package main

import (
	"context"
	"fmt"
	"maps"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
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
	var whole *optim.State // --zero: the shards consolidated, so any run can resume it
	if z, ok := s.opt.(*optim.Zero); ok {
		st, err := z.Consolidate(ctx)
		if err != nil {
			return fmt.Errorf("checkpoint at step %d: %w", step, err)
		}
		whole = &st
	}
	dlExtra, global, err := s.dilocoCheckpoint(ctx, t.g) // diloco.go: Note [DiLoCo in checkpoints]
	if err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	if t.g.Rank() != 0 {
		return nil
	}
	ck := checkpoint.Capture(step, s.params, s.opt)
	if whole != nil {
		ck.Optimizer = *whole
	}
	for i, g := range global { // DiLoCo: the model is the global parameters
		ck.Params[s.params.Name(i)] = g
	}
	ck.Extra = hookState
	if dlExtra != nil {
		if ck.Extra == nil {
			ck.Extra = map[string][]float64{}
		}
		maps.Copy(ck.Extra, dlExtra)
	}
	ck.Meta = t.runMeta() // Note [resume that cannot lie]
	if s.dl != nil {
		ck.Meta["diloco"] = t.c.dilocoLabel()
	}
	// The schedule's position, name and steps (optflags.go).
	s.saveSchedule(t.c, ck, s.total)
	ck.Files = map[string][]byte{model.CardFile: cardOf(s.spec, t.c, t.ds).Marshal()} // card.go
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
// checkpoint (see checkpoint.LoadWith), every file verified, or nil when
// the directory holds none yet (Note [checkpoint directories are owned]).
// Every rank reads it, and then they check that they read the same step:
// with --checkpoint-keep, a rank that saw damage the others did not
// (another node's copy of the directory, say) would fall back alone.
func (t *trainer) loadCheckpoint(ctx context.Context) (*checkpoint.Checkpoint, error) {
	var ck *checkpoint.Checkpoint
	step, from := -1, t.c.checkpointDir // -1: none
	if checkpoint.Exists(t.c.checkpointDir) {
		var err error
		if ck, from, err = checkpoint.LoadWith(t.c.checkpointDir, t.checkpointOptions()); err != nil {
			return nil, err
		}
		step = ck.Step
		t.log.Info("checkpoint loaded", zap.Int("rank", t.g.Rank()), zap.String("checkpoint", from), zap.Int("step", ck.Step))
	}
	v := []float64{float64(step), -float64(step)}
	if err := t.g.AllReduce(ctx, pg.Float64s(v), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return nil, fmt.Errorf("checking that every rank loaded the same checkpoint: %w", err)
	}
	if hi, lo := int(v[0]), int(-v[1]); hi != lo {
		if lo < 0 {
			return nil, usagef("some ranks found no checkpoint in --checkpoint %s and others one of step %d (this rank: %s); "+
				"every rank must see the same --checkpoint directory", t.c.checkpointDir, hi, describeStep(step))
		}
		return nil, usagef("the ranks loaded checkpoints of different steps, %d to %d (this rank: step %d from %s); "+
			"every rank must see the same --checkpoint directory", lo, hi, ck.Step, from)
	}
	if ck == nil && t.g.Rank() == 0 {
		t.log.Info("--resume: no checkpoint in the directory yet; starting from step 0",
			zap.String("checkpoint", t.c.checkpointDir))
	}
	return ck, nil
}

// describeStep is a rank's part of the message about ranks that loaded
// different checkpoints.
func describeStep(step int) string {
	if step < 0 {
		return "none"
	}
	return fmt.Sprintf("step %d", step)
}
