package optim

import "fmt"

// Recipe describes a warmup followed by a main schedule, ddp-train's
// --lr-schedule: for WarmupSteps W > 0 it is torch 1.13's
//
//	SequentialLR([LinearLR(start_factor=F, end_factor=1, total_iters=W), MAIN], milestones=[W])
//
// and for W = 0 MAIN alone, with MAIN by Kind:
//
//	"constant"  ConstantLR(factor=1, total_iters=0): the rate stays LR
//	"cosine"    CosineAnnealingLR(T_max=S−W, eta_min=MinLR)
//	"linear"    LinearLR(start_factor=1, end_factor=MinLR/LR, total_iters=S−W)
//	"step"      StepLR(step_size=StepSize, gamma=Gamma)
//
// S being Steps, the run's optimizer steps, which only "cosine" and
// "linear" need.
type Recipe struct {
	Kind              string   // "constant" (or ""), "cosine", "linear" or "step"
	LR                float64  // the optimizer's rate, torch's initial_lr
	Steps             int      // S: the run's optimizer steps, > W for "cosine" and "linear"
	WarmupSteps       int      // W >= 0
	WarmupStartFactor *float64 // F in (0, 1]; nil is torch's default, 1/3
	MinLR             float64  // eta_min for "cosine", the end rate (<= LR) for "linear"
	StepSize          int      // "step": step_size >= 1
	Gamma             *float64 // "step": gamma; nil is torch's default, 0.1
}

// ScheduleKinds lists the Kinds a Recipe takes.
func ScheduleKinds() []string { return []string{"constant", "cosine", "linear", "step"} }

// NewSchedule returns the schedule r describes.
func NewSchedule(r Recipe) (*Schedule, error) {
	if r.WarmupSteps < 0 {
		return nil, fmt.Errorf("optim: %d warmup steps: want >= 0", r.WarmupSteps)
	}
	main, err := r.main()
	if err != nil || r.WarmupSteps == 0 {
		return main, err
	}
	f := 1.0 / 3
	if r.WarmupStartFactor != nil {
		f = *r.WarmupStartFactor
	}
	warmup, err := LinearLR(r.LR, f, 1, r.WarmupSteps)
	if err != nil {
		return nil, fmt.Errorf("%w (the warmup)", err)
	}
	return SequentialLR([]*Schedule{warmup, main}, []int{r.WarmupSteps})
}

func (r Recipe) main() (*Schedule, error) {
	rest := r.Steps - r.WarmupSteps
	switch r.Kind {
	case "constant", "":
		return Constant(r.LR)
	case "step":
		g := 0.1
		if r.Gamma != nil {
			g = *r.Gamma
		}
		return StepLR(r.LR, r.StepSize, g)
	case "cosine", "linear":
		if rest < 1 {
			return nil, fmt.Errorf("optim: a %s schedule over %d steps with %d warmup steps: want more steps than warmup "+
				"steps", r.Kind, r.Steps, r.WarmupSteps)
		}
		if r.Kind == "cosine" {
			return CosineAnnealingLR(r.LR, rest, r.MinLR)
		}
		if !(r.LR > 0 && r.MinLR >= 0 && r.MinLR <= r.LR) {
			return nil, fmt.Errorf("optim: a linear schedule from %v to %v: want 0 <= min rate <= rate, rate > 0", r.LR,
				r.MinLR)
		}
		return LinearLR(r.LR, 1, r.MinLR/r.LR, rest)
	}
	return nil, fmt.Errorf("optim: unknown schedule %q; choose one of constant, cosine, linear, step", r.Kind)
}
