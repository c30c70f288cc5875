package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/model"
)

// Note [the card names the model]
//
// --save and every checkpoint write a model card beside the parameters
// (model's Note [model cards]). --init, --resume and `ddp-train eval`
// read it before anything is built (applyCards, from parseCommand), so no
// architecture flag is needed to load a model: each of --model, --hidden,
// --activation, --dtype and (with --data) --classes that the command line
// did not give takes the card's value, and one it gave that differs is
// refused (exit 2) naming the card's field. With --resume-allow-changes
// model the flags describe the model and the checkpoint's card is not
// read: the change is the point. A directory without a card
// (a save from before cards, or .npy files another tool wrote) loads as
// the flags describe it, as it always has. The model built is checked
// against the card once more when the parameters are loaded (loadInit,
// resumeSession): the data's input shape is known only then.

// cardFlags pairs a card's fields with the flags that set them.
var cardFlags = []struct{ field, flag string }{
	{"kind", "model"}, {"hidden", "hidden"}, {"activation", "activation"}, {"classes", "classes"},
	{"dtype", "dtype"},
}

// applyCards applies the cards of --init and, with --resume, of
// --checkpoint's newest checkpoint: Note [the card names the model].
func (c *config) applyCards() error {
	given := c.given
	if c.initDir != "" {
		card, ok, err := initCard(*c)
		if err != nil {
			return err
		}
		if ok {
			if err := c.takeCard(card, "--init "+c.initDir, given); err != nil {
				return err
			}
			given = func(string) bool { return true } // the checkpoint's card must agree with --init's
		}
	}
	if !c.resume || c.modelMayChange() || !checkpoint.Exists(c.checkpointDir) {
		return nil
	}
	ck, _, err := checkpoint.LoadWith(c.checkpointDir, checkpoint.Options{Keep: c.checkpointKeep, ManifestOnly: true})
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	card, ok, err := checkpointCard(ck)
	if err != nil || !ok {
		return err
	}
	return c.takeCard(card, "--checkpoint "+c.checkpointDir, given)
}

// modelMayChange reports --resume-allow-changes model: the flags then
// describe the model, as they did before cards, and resumeSession
// compares the checkpoint's card with nothing.
func (c config) modelMayChange() bool {
	for _, f := range strings.Split(c.resumeAllow, ",") {
		if strings.TrimSpace(f) == "model" {
			return true
		}
	}
	return false
}

// initCard is --init's card, if it has one: a --save output's, or under
// `ddp-train eval` a checkpoint directory's newest.
func initCard(c config) (model.Card, bool, error) {
	if c.evalOnly && checkpoint.Exists(c.initDir) {
		ck, _, err := checkpoint.LoadWith(c.initDir, checkpoint.Options{ManifestOnly: true})
		if err != nil {
			return model.Card{}, false, fmt.Errorf("--init %s: %w", c.initDir, err)
		}
		return checkpointCard(ck)
	}
	card, err := model.ReadCard(c.initDir)
	if errors.Is(err, model.ErrNoCard) {
		return model.Card{}, false, nil
	}
	if err != nil {
		return model.Card{}, false, fmt.Errorf("--init %s: %w", c.initDir, err)
	}
	return card, true, nil
}

// checkpointCard is ck's card, if it has one.
func checkpointCard(ck *checkpoint.Checkpoint) (model.Card, bool, error) {
	b, ok := ck.Files[model.CardFile]
	if !ok {
		return model.Card{}, false, nil
	}
	card, err := model.ParseCard(b)
	return card, err == nil, err
}

// takeCard sets each model flag the command line did not give from card,
// and refuses one it gave that differs, naming the field;
// given reports whether the command line gave a flag.
func (c *config) takeCard(card model.Card, from string, given func(string) bool) error {
	values := map[string]string{}
	for _, f := range card.Fields() {
		values[f.Name] = f.Value
	}
	mine := map[string]string{"kind": c.model, "hidden": hiddenFlag(c.hidden), "activation": c.activation,
		"classes": strconv.Itoa(c.classes), "dtype": c.dtype}
	for _, f := range cardFlags {
		want, has := values[f.field]
		switch {
		case !given(f.flag):
		case !has: // the cnn's hidden sizes are fixed
			return usagef("%s: its model card says kind %s, which has no %s; leave --%s out", from, card.Kind, f.field,
				f.flag)
		case f.flag == "classes" && c.data == "":
		case mine[f.field] != want:
			return usagef("%s: its model card says %s %s, and --%s %s was given; leave --%s out to load the model as the "+
				"card describes it", from, f.field, want, f.flag, mine[f.field], f.flag)
		}
	}
	c.model, c.activation, c.dtype = card.Kind, card.Activation, card.Dtype
	if card.Kind == "mlp" { // the cnn's are fixed; --hidden's value stays what checkpoints record
		c.hidden = slices.Clone(card.Hidden)
	}
	if c.data != "" { // the synthetic set has its own classes: loadInit compares them
		c.classes = card.Classes
	}
	return nil
}

// hiddenFlag is --hidden's spelling of sizes, as Card.Fields spells them.
func hiddenFlag(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// cardOf is the card of the model s, trained on ds (c's --data, or the
// synthetic set): Note [the card names the model].
func cardOf(s model.Spec, c config, ds *dataset.Dataset) model.Card {
	card := s.Card()
	switch {
	case c.data == "":
		card.InputFormat, card.InputScaling = "synthetic", "x"
	case ds.Pixels != nil:
		card.InputFormat, card.InputScaling = "idx", "x/255"
	case ds.X != nil:
		card.InputFormat, card.InputScaling = "npy", "x"
	}
	return card
}

// checkCard refuses a checkpoint whose card describes another model than
// s, unless the model may change: Note [the card names the model].
func checkCard(ck *checkpoint.Checkpoint, s model.Spec, mayChange bool) error {
	if mayChange {
		return nil
	}
	card, ok, err := checkpointCard(ck)
	if err == nil && ok {
		err = card.Check(s)
	}
	return err
}
