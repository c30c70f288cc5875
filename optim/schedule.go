package optim

import (
	"fmt"
	"math"
	"slices"
)

// Schedule is a learning-rate schedule stepped as torch's lr_scheduler
// is: LR is the rate for the next optimizer step, and Step, called once
// after every optimizer step, moves it on, by torch 1.13's recursive
// ("chainable") get_lr, which reads the previous rate, not by the closed
// form. So the rate at optimizer step t (counted from 0) is what torch's
// scheduler gives after t scheduler.step() calls, to the last bit up to
// math.Cos and the FMA torch's Python never uses. Every product is
// rounded before the sum that follows it.
//
// A Schedule is a value and does not drive an optimizer: a training loop
// calls opt.SetLR(s.LR()) before each opt.Step and s.Step() after it.
// State and Load checkpoint it; a loaded Schedule continues bit for bit.
// A Schedule is not safe for concurrent use.
type Schedule struct {
	name       string
	base       float64 // torch's initial_lr
	lr         float64 // the optimizer's param_group["lr"]: the rate of the next step
	step       int     // Step calls: SequentialLR's last_epoch
	parts      []rule  // one, or SequentialLR's schedulers
	milestones []int   // SequentialLR's, one fewer than parts
}

// ScheduleState is a Schedule's position, for a checkpoint.
type ScheduleState struct {
	Name string  // the schedule's Name; Load checks it when it is set
	Step int     // Step calls
	LR   float64 // the rate of the next optimizer step
}

// rule is one torch scheduler's formulas. chain is get_lr at last_epoch
// epoch >= 1 from the current rate lr; closed is _get_closed_form_lr at
// epoch 0 of a scheduler whose initial_lr is base, which SequentialLR's
// step(0) at a milestone uses. first is get_lr at last_epoch 0, from the
// rate lr set when it is constructed.
type rule interface {
	first(lr float64) float64
	chain(epoch int, lr, base float64) float64
	closed0(base float64) float64
	name() string
}

// Constant is no schedule: the rate stays lr.
func Constant(lr float64) (*Schedule, error) { return single(lr, constRule{}) }

// LinearLR is torch's LinearLR(start_factor, end_factor, total_iters) on
// an optimizer whose rate is lr: the rate goes linearly from
// lr·startFactor to lr·endFactor over totalIters steps and stays there.
// Both factors lie in (0, 1] (torch's chainable form divides by zero at
// a start factor of 0) and totalIters >= 1.
func LinearLR(lr, startFactor, endFactor float64, totalIters int) (*Schedule, error) {
	switch {
	case !(startFactor > 0 && startFactor <= 1) || !(endFactor >= 0 && endFactor <= 1):
		return nil, fmt.Errorf("optim: LinearLR factors %v and %v: want a start in (0, 1] and an end in [0, 1]",
			startFactor, endFactor)
	case totalIters < 1:
		return nil, fmt.Errorf("optim: LinearLR over %d steps: want at least 1", totalIters)
	}
	return single(lr, linearRule{start: startFactor, end: endFactor, total: totalIters})
}

// CosineAnnealingLR is torch's CosineAnnealingLR(T_max, eta_min): half a
// cosine from lr down to etaMin over tMax >= 1 steps (and, as torch's,
// back up after them).
func CosineAnnealingLR(lr float64, tMax int, etaMin float64) (*Schedule, error) {
	if tMax < 1 || !finite(etaMin) {
		return nil, fmt.Errorf("optim: CosineAnnealingLR(T_max %d, eta_min %v): want T_max >= 1 and a finite eta_min",
			tMax, etaMin)
	}
	return single(lr, cosineRule{tMax: tMax, etaMin: etaMin})
}

// StepLR is torch's StepLR(step_size, gamma): the rate is multiplied by
// gamma every stepSize >= 1 steps.
func StepLR(lr float64, stepSize int, gamma float64) (*Schedule, error) {
	if stepSize < 1 || !finite(gamma) || gamma < 0 {
		return nil, fmt.Errorf("optim: StepLR(step_size %d, gamma %v): want step_size >= 1 and a finite gamma >= 0",
			stepSize, gamma)
	}
	return single(lr, stepRule{size: stepSize, gamma: gamma})
}

// SequentialLR is torch's SequentialLR(schedulers, milestones): the first
// schedule until step milestones[0], where the second starts from its
// epoch 0, and so on. It takes the schedules' formulas, not their
// positions, so they should be fresh; they must share one base rate and
// not be sequential themselves, and the milestones must increase from 1.
func SequentialLR(schedules []*Schedule, milestones []int) (*Schedule, error) {
	if len(schedules) == 0 || len(milestones) != len(schedules)-1 {
		return nil, fmt.Errorf("optim: SequentialLR of %d schedules with %d milestones: want one fewer milestone than "+
			"schedules, and at least one schedule", len(schedules), len(milestones))
	}
	s := &Schedule{name: "sequential", base: schedules[0].base, milestones: slices.Clone(milestones)}
	for i, sub := range schedules {
		if len(sub.parts) != 1 || sub.base != s.base {
			return nil, fmt.Errorf("optim: SequentialLR: schedule %d is sequential itself or has base rate %v, not %v",
				i, sub.base, s.base)
		}
		s.parts = append(s.parts, sub.parts[0])
		s.name += "/" + sub.name
	}
	for i, m := range milestones {
		if m < 1 || (i > 0 && m <= milestones[i-1]) {
			return nil, fmt.Errorf("optim: SequentialLR milestones %v: want increasing steps >= 1", milestones)
		}
	}
	s.lr = s.parts[0].first(s.base)
	return s, nil
}

func single(lr float64, r rule) (*Schedule, error) {
	if err := checkLR(lr); err != nil {
		return nil, err
	}
	return &Schedule{name: r.name(), base: lr, lr: r.first(lr), parts: []rule{r}}, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Name says which schedule this is: "constant", "linear", "cosine",
// "step", or "sequential/" and its parts' names joined by "/".
func (s *Schedule) Name() string { return s.name }

// LR is the rate for the next optimizer step.
func (s *Schedule) LR() float64 { return s.lr }

// Step moves the schedule on by one optimizer step, as torch's
// scheduler.step().
func (s *Schedule) Step() {
	s.step++
	idx, _ := slices.BinarySearch(s.milestones, s.step+1) // bisect_right(milestones, step)
	r := s.parts[idx]
	switch {
	case idx > 0 && s.milestones[idx-1] == s.step:
		s.lr = r.closed0(s.base)
	case idx > 0:
		s.lr = r.chain(s.step-s.milestones[idx-1], s.lr, s.base)
	default:
		s.lr = r.chain(s.step, s.lr, s.base)
	}
}

// State returns the schedule's position.
func (s *Schedule) State() ScheduleState { return ScheduleState{Name: s.name, Step: s.step, LR: s.lr} }

// Load moves the schedule to st, taken from a schedule made the same way,
// so that it continues exactly as that one would have.
func (s *Schedule) Load(st ScheduleState) error {
	if st.Name != "" && st.Name != s.name {
		return fmt.Errorf("optim: the schedule state is %s's, but this schedule is %s; resume with the same schedule",
			st.Name, s.name)
	}
	if st.Step < 0 || !finite(st.LR) || st.LR < 0 {
		return fmt.Errorf("optim: schedule state at step %d with rate %v: want a step >= 0 and a finite rate >= 0",
			st.Step, st.LR)
	}
	s.step, s.lr = st.Step, st.LR
	return nil
}

type constRule struct{}

func (constRule) name() string                       { return "constant" }
func (constRule) first(lr float64) float64           { return lr }
func (constRule) chain(_ int, lr, _ float64) float64 { return lr }
func (constRule) closed0(base float64) float64       { return base }

// linearRule is LinearLR:
//
//	epoch 0           lr·start
//	epoch > total     lr
//	otherwise         lr·(1 + (end−start)/(total·start + (epoch−1)·(end−start)))
//	closed form at 0  base·(start + (end−start)·0/total)
type linearRule struct {
	start, end float64
	total      int
}

func (linearRule) name() string               { return "linear" }
func (r linearRule) first(lr float64) float64 { return lr * r.start }

func (r linearRule) chain(epoch int, lr, _ float64) float64 {
	if epoch > r.total {
		return lr
	}
	d := r.end - r.start
	return lr * (1 + d/(float64(float64(r.total)*r.start)+float64(float64(epoch-1)*d)))
}

func (r linearRule) closed0(base float64) float64 {
	return base * (r.start + float64(r.end-r.start)*0/float64(r.total))
}

// cosineRule is CosineAnnealingLR:
//
//	epoch 0                            lr
//	(epoch−1−T) mod 2T = 0             lr + (base−η)·(1 − cos(π/T))/2
//	otherwise                          (1 + cos(π·epoch/T)) / (1 + cos(π·(epoch−1)/T)) · (lr − η) + η
//	closed form at 0                   η + (base−η)·(1 + cos(π·0/T))/2
//
// Torch's branch for a scheduler constructed at last_epoch > 0 never
// applies here.
type cosineRule struct {
	tMax   int
	etaMin float64
}

func (cosineRule) name() string             { return "cosine" }
func (cosineRule) first(lr float64) float64 { return lr }

func (r cosineRule) chain(epoch int, lr, base float64) float64 {
	t := float64(r.tMax)
	if mod(epoch-1-r.tMax, 2*r.tMax) == 0 {
		return lr + float64(float64(base-r.etaMin)*(1-math.Cos(math.Pi/t)))/2
	}
	a := 1 + math.Cos(float64(math.Pi*float64(epoch))/t)
	b := 1 + math.Cos(float64(math.Pi*float64(epoch-1))/t)
	return float64(a/b*(lr-r.etaMin)) + r.etaMin
}

func (r cosineRule) closed0(base float64) float64 {
	return r.etaMin + float64(float64(base-r.etaMin)*(1+math.Cos(float64(math.Pi*0)/float64(r.tMax))))/2
}

// mod is Python's %, never negative for m > 0.
func mod(a, m int) int { return ((a % m) + m) % m }

// stepRule is StepLR: lr·γ at every epoch divisible by the step size, lr
// otherwise; base·γ^0 in closed form at 0.
type stepRule struct {
	size  int
	gamma float64
}

func (stepRule) name() string             { return "step" }
func (stepRule) first(lr float64) float64 { return lr }

func (r stepRule) chain(epoch int, lr, _ float64) float64 {
	if epoch%r.size != 0 {
		return lr
	}
	return lr * r.gamma
}

func (r stepRule) closed0(base float64) float64 { return base * math.Pow(r.gamma, 0) }
