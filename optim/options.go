package optim

import (
	"fmt"
	"math"
	"strings"
)

// Options are an optimizer's hyperparameters, named after torch.optim's
// arguments. A nil field takes torch 1.13's default for the optimizer
// NewWith makes; Set gives a pointer, so an explicit 0 (say AdamW without
// weight decay) is Set(0), distinct from nil. A field the optimizer does
// not take must be nil (or false), so a misspelt configuration is refused
// rather than ignored.
//
//	field        sgd     momentum  adam            adamw
//	LR           needed  needed    1e-3            1e-3
//	Momentum     0       0.9       -               -
//	Dampening    0       0         -               -
//	Nesterov     false   false     -               -
//	WeightDecay  0       0         0 (coupled)     1e-2 (decoupled)
//	Betas        -       -         (0.9, 0.999)    (0.9, 0.999)
//	Eps          -       -         1e-8            1e-8
//
// "momentum" is "sgd" whose default momentum is 0.9. AMSGrad, maximize
// and torch's other flags are not offered.
type Options struct {
	LR          *float64    // lr, >= 0
	Momentum    *float64    // SGD's momentum μ, >= 0
	Dampening   *float64    // SGD's dampening
	Nesterov    bool        // SGD's nesterov; needs momentum > 0 and dampening 0, as torch checks
	WeightDecay *float64    // weight_decay, >= 0: g += wd·p for SGD and Adam, p *= 1 − lr·wd for AdamW
	Betas       *[2]float64 // Adam's and AdamW's betas, each in [0, 1)
	Eps         *float64    // Adam's and AdamW's eps, >= 0
}

// Set returns a pointer to v, for an Options field.
func Set(v float64) *float64 { return &v }

// hyper is Options resolved against an optimizer's defaults.
type hyper struct {
	lr, momentum, dampening, weightDecay, beta1, beta2, eps float64
	nesterov                                                bool
}

// NewWith returns the optimizer called name (one of Names) for numParams
// parameters, with o's hyperparameters and torch 1.13's defaults for the
// fields o leaves nil. New(name, lr, n) is NewWith(name, Options{LR:
// Set(lr)}, n).
func NewWith(name string, o Options, numParams int) (Optimizer, error) {
	h, err := resolve(name, o)
	if err != nil {
		return nil, err
	}
	if numParams < 1 {
		return nil, fmt.Errorf("optim: %d parameters: want at least 1", numParams)
	}
	switch name {
	case "sgd", "momentum":
		var kinds []string
		if h.momentum != 0 {
			kinds = []string{"momentum"}
		}
		return &sgd{base: newBase(name, h.lr, numParams, kinds...), momentum: h.momentum, dampening: h.dampening,
			nesterov: h.nesterov, weightDecay: h.weightDecay}, nil
	default: // adam, adamw: resolve knows no other
		return &adam{base: newBase(name, h.lr, numParams, "exp_avg", "exp_avg_sq"), beta1: h.beta1, beta2: h.beta2,
			eps: h.eps, weightDecay: h.weightDecay, decoupled: name == "adamw"}, nil
	}
}

// resolve checks o for optimizer name, as torch's constructors check
// their arguments, and fills in the defaults.
func resolve(name string, o Options) (hyper, error) {
	h := hyper{beta1: 0.9, beta2: 0.999, eps: 1e-8}
	isSGD := name == "sgd" || name == "momentum"
	switch {
	case isSGD:
		if name == "momentum" {
			h.momentum = 0.9
		}
		if err := refuse(name, o.Betas != nil, "Betas", o.Eps != nil, "Eps"); err != nil {
			return h, err
		}
		if o.LR == nil {
			return h, fmt.Errorf("optim: %s needs a learning rate (Options.LR), as torch's SGD does", name)
		}
	case name == "adam" || name == "adamw":
		h.lr = 1e-3
		if name == "adamw" {
			h.weightDecay = 1e-2
		}
		if err := refuse(name, o.Momentum != nil, "Momentum", o.Dampening != nil, "Dampening", o.Nesterov,
			"Nesterov"); err != nil {
			return h, err
		}
	default:
		return h, fmt.Errorf("optim: unknown optimizer %q; choose one of %s", name, strings.Join(Names(), ", "))
	}
	for _, f := range []struct {
		into *float64
		from *float64
		what string
		min  float64
	}{
		{&h.lr, o.LR, "learning rate", 0}, {&h.momentum, o.Momentum, "momentum", 0},
		{&h.dampening, o.Dampening, "dampening", math.Inf(-1)}, {&h.weightDecay, o.WeightDecay, "weight decay", 0},
		{&h.eps, o.Eps, "eps", 0},
	} {
		if f.from == nil {
			continue
		}
		if v := *f.from; math.IsNaN(v) || math.IsInf(v, 0) || v < f.min {
			if math.IsInf(f.min, -1) {
				return h, fmt.Errorf("optim: %s %v: want a finite number", f.what, v)
			}
			return h, fmt.Errorf("optim: %s %v: want a finite number >= %v", f.what, v, f.min)
		}
		*f.into = *f.from
	}
	if o.Betas != nil {
		for i, b := range o.Betas {
			if !(b >= 0 && b < 1) {
				return h, fmt.Errorf("optim: betas[%d] = %v: want a number in [0, 1)", i, b)
			}
		}
		h.beta1, h.beta2 = o.Betas[0], o.Betas[1]
	}
	h.nesterov = o.Nesterov
	if h.nesterov && (h.momentum <= 0 || h.dampening != 0) {
		return h, fmt.Errorf("optim: Nesterov momentum needs momentum > 0 and dampening 0 (momentum %v, dampening %v), "+
			"as torch's SGD checks", h.momentum, h.dampening)
	}
	return h, nil
}

// refuse names the first field that is set but that optimizer name does
// not take; set and field alternate.
func refuse(name string, pairs ...any) error {
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i].(bool) {
			return fmt.Errorf("optim: %s takes no %s; leave Options.%s unset", name, pairs[i+1], pairs[i+1])
		}
	}
	return nil
}
