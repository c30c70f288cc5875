package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Note [ddp-train eval]
//
// `ddp-train eval --init DIR [--data F --labels F] [--nproc N] [--summary F]`
// scores a saved model on a data set: DIR is a --save output or a
// --checkpoint directory (its newest intact checkpoint), the data set
// --data/--labels or, without them, the built-in synthetic set training
// uses (--samples, --seed). It runs as a training run does (the same
// launcher, backends, model flags and input checks, exit 2 on bad
// input), with nothing to train: each rank scores its shard of the set
// and the ranks sum the figures (Note [held-out evaluation]). Rank 0
// prints one line, "eval_loss L eval_accuracy A samples N", and writes
// them to --summary under eval_loss, eval_accuracy and eval_samples. The
// flags that only training acts on are refused (Note [no flag is ignored]).

// evalCommandFlags are the flags `ddp-train eval` acts on.
func evalCommandFlags() []string {
	return []string{
		"nproc", "backend", "model", "hidden", "activation", "data", "labels", "classes", "samples", "seed", "dtype",
		"batch-size", "init", "summary", "timeout", "log-format", "log-level", "listen-addr", "shm", "oversubscribe",
		"debug-collectives", "engine",
	}
}

// parseCommand parses ddp-train's command line, `ddp-train eval ...`
// included.
func parseCommand(args []string, stderr io.Writer) (config, error) {
	eval := len(args) > 0 && args[0] == "eval"
	if eval {
		args = args[1:]
	}
	c, err := parseFlags(args, stderr)
	if err == nil && eval {
		err = c.asEvalCommand()
	}
	if err != nil {
		return c, err
	}
	return c, c.applyCards() // card.go: Note [the card names the model]
}

// asEvalCommand makes c the run of `ddp-train eval`: Note [ddp-train eval].
func (c *config) asEvalCommand() error {
	for _, name := range c.setFlags {
		if !slices.Contains(evalCommandFlags(), name) {
			return usagef("ddp-train eval: --%s does nothing here (it scores --init on --data and trains nothing); leave "+
				"it out", name)
		}
	}
	switch {
	case len(c.command) > 0:
		return usagef("ddp-train eval takes flags only, not %q", c.command[0])
	case c.initDir == "":
		return usagef("ddp-train eval needs --init DIR: a --save output or a --checkpoint directory")
	}
	c.evalOnly, c.steps, c.epochs = true, 0, 0
	return nil
}

// loadInit loads --init into p: a --save output (one .npy per
// parameter), or under `ddp-train eval` also a --checkpoint directory's
// newest intact checkpoint.
// Its model card, where it has one, must describe p's model (card.go).
func loadInit(p *model.Params, c config) error {
	if !c.evalOnly || !checkpoint.Exists(c.initDir) {
		card, err := model.ReadCard(c.initDir)
		if err == nil {
			err = card.Check(p.Spec())
		} else if errors.Is(err, model.ErrNoCard) {
			err = nil // loads as the flags describe it
		}
		if err != nil {
			return fmt.Errorf("--init %s: %w", c.initDir, err)
		}
		return p.LoadNPY(c.initDir)
	}
	ck, _, err := checkpoint.LoadWith(c.initDir, checkpoint.Options{})
	if err == nil {
		err = checkCard(ck, p.Spec(), false) // card.go
	}
	if err != nil {
		return fmt.Errorf("--init %s: %w", c.initDir, err)
	}
	opt, err := optim.New(cmp.Or(ck.Optimizer.Name, "sgd"), 1, p.Len()) // holds the state Restore checks
	if err != nil {
		return fmt.Errorf("--init %s: %w: %w", c.initDir, checkpoint.ErrIncompatible, err)
	}
	if err := ck.Restore(p, opt); err != nil {
		return fmt.Errorf("--init %s: %w", c.initDir, err)
	}
	return nil
}

// evalSummary is --summary's JSON under `ddp-train eval`.
type evalSummary struct {
	EvalLoss     float64 `json:"eval_loss"`
	EvalAccuracy float64 `json:"eval_accuracy"`
	EvalSamples  int     `json:"eval_samples"`
	WorldSize    int     `json:"world_size"`
	Backend      string  `json:"backend"`
}

// scoreOnly is one rank of `ddp-train eval`: Note [ddp-train eval].
func (t *trainer) scoreOnly(ctx context.Context, s *session) error {
	r, err := s.eval.evaluate(ctx, t.g, s.params, s.start)
	if err != nil || t.g.Rank() != 0 {
		return err
	}
	t.log.Info("eval", zap.Float64("eval_loss", r.Loss), zap.Float64("eval_accuracy", r.Accuracy),
		zap.Int("samples", r.Samples), zap.String("init", t.c.initDir))
	fmt.Fprintf(t.out, "eval_loss %s eval_accuracy %s samples %d\n", strconv.FormatFloat(r.Loss, 'g', -1, 64),
		strconv.FormatFloat(r.Accuracy, 'g', -1, 64), r.Samples)
	if t.c.summary == "" {
		return nil
	}
	tmp, err := stageSummary(t.c.summary, evalSummary{EvalLoss: r.Loss, EvalAccuracy: r.Accuracy,
		EvalSamples: r.Samples, WorldSize: t.g.Size(), Backend: pg.BackendName(t.g)})
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, t.c.summary); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--summary: %w", err)
	}
	return nil
}
