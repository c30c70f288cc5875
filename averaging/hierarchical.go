package averaging

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Level is one level of a HierarchicalModelAverager: groups of GroupSize
// consecutive ranks average their parameters every Period steps.
type Level struct {
	Period    int
	GroupSize int
}

// HierarchicalOptions configure NewHierarchicalModelAverager, after
// torch's HierarchicalModelAverager(period_group_size_dict, warmup_steps).
type HierarchicalOptions struct {
	// Levels is period_group_size_dict, in its order: periods ascending,
	// the last level's GroupSize the whole group's size. Groups of a level
	// are consecutive ranks, as dist.new_subgroups(group_size) makes them.
	Levels []Level
	// WarmupSteps: no averaging before this step.
	WarmupSteps int
	// Logger receives the hierarchy, once. nil means none.
	Logger *zap.Logger
}

// HierarchicalModelAverager is torch's HierarchicalModelAverager
// (hierarchical SGD, https://arxiv.org/abs/2010.12998): after the warm-up,
// at each step it averages over the groups of the level with the largest
// period that divides the step, if any, and counts the step. A higher
// level's groups contain a lower level's, so averaging there subsumes the
// lower one.
type HierarchicalModelAverager struct {
	opts   HierarchicalOptions
	groups []pg.ProcessGroup // one per level: this rank's group
	owned  []bool            // made here: Close closes them
	step   int
}

// NewHierarchicalModelAverager makes this rank's group of every level
// below the top (collective over g: every rank calls it at the same point)
// and returns the averager, at step 0.
func NewHierarchicalModelAverager(ctx context.Context, g pg.ProcessGroup,
	o HierarchicalOptions) (*HierarchicalModelAverager, error) {
	if len(o.Levels) == 0 {
		return nil, errors.New("averaging: Levels (period_group_size_dict) must not be empty")
	}
	if o.Levels[0].Period <= 0 {
		return nil, fmt.Errorf("averaging: the minimum period %d must be a positive value", o.Levels[0].Period)
	}
	for i := 1; i < len(o.Levels); i++ {
		if o.Levels[i].Period <= o.Levels[i-1].Period {
			return nil, fmt.Errorf("averaging: periods must ascend, level by level (got %d after %d)", o.Levels[i].Period,
				o.Levels[i-1].Period)
		}
	}
	if last := o.Levels[len(o.Levels)-1].GroupSize; last != g.Size() {
		return nil, fmt.Errorf("averaging: the last level's group size %d must be equal to the size of the process group %d",
			last, g.Size())
	}
	if o.WarmupSteps < 0 {
		return nil, fmt.Errorf("averaging: WarmupSteps %d must be a non-negative number", o.WarmupSteps)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if o.Levels[len(o.Levels)-1].Period == 1 {
		log.Warn("the maximum period is 1: model averaging costs no less than DDP's own gradient averaging; use DDP alone")
	}
	a := &HierarchicalModelAverager{opts: o}
	log.Info("model averaging hierarchy")
	for _, l := range o.Levels {
		log.Info("each group averages its parameters every so many steps, unless a higher level does",
			zap.Int("group_size", l.GroupSize), zap.Int("period", l.Period))
		if l.GroupSize == g.Size() {
			a.groups, a.owned = append(a.groups, g), append(a.owned, false)
			continue
		}
		if l.GroupSize <= 0 || g.Size()%l.GroupSize != 0 {
			a.Close()
			return nil, fmt.Errorf("averaging: group size %d must divide the world size %d", l.GroupSize, g.Size())
		}
		var sp pg.Splitter
		if !pg.As(g, &sp) {
			a.Close()
			return nil, fmt.Errorf("averaging: a %s group cannot make subgroups (no pg.Splitter)", pg.BackendName(g))
		}
		sub, err := sp.Split(ctx, g.Rank()/l.GroupSize, g.Rank())
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("averaging: making the groups of %d ranks: %w", l.GroupSize, err)
		}
		a.groups, a.owned = append(a.groups, sub), append(a.owned, true)
	}
	return a, nil
}

// AverageParameters averages params over this step's group, if any, and
// counts the step. It returns the group size it averaged over, or 0.
func (a *HierarchicalModelAverager) AverageParameters(ctx context.Context, params []pg.Tensor) (int, error) {
	step := a.step
	a.step++
	if step < a.opts.WarmupSteps {
		return 0, nil
	}
	for i := len(a.opts.Levels) - 1; i >= 0; i-- {
		if step%a.opts.Levels[i].Period == 0 {
			return a.groups[i].Size(), AverageParameters(ctx, a.groups[i], params)
		}
	}
	return 0, nil
}

// Step is the number of steps counted.
func (a *HierarchicalModelAverager) Step() int { return a.step }

// SetStep sets the step count, for a resumed run.
func (a *HierarchicalModelAverager) SetStep(step int) error {
	if step < 0 {
		return errors.New("averaging: a step count cannot be negative")
	}
	a.step = step
	return nil
}

// Close closes the subgroups the averager made.
func (a *HierarchicalModelAverager) Close() error {
	var errs []error
	for i, g := range a.groups {
		if a.owned[i] {
			errs = append(errs, g.Close())
		}
	}
	return errors.Join(errs...)
}
