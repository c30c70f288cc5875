package main

import (
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Note [no flag is ignored] for the optimizer, schedule and clipping
// flags: each one the run would not act on is a usage error naming it.
func TestOptimFlagsRefused(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--optimizer", "adam", "--momentum", "0.9"}, "--momentum does nothing with --optimizer adam"},
		{[]string{"--optimizer", "adamw", "--dampening", "0.1"}, "--dampening does nothing with --optimizer adamw"},
		{[]string{"--optimizer", "adam", "--nesterov"}, "--nesterov does nothing with --optimizer adam"},
		{[]string{"--optimizer", "sgd", "--betas", "0.8,0.9"}, "--betas does nothing with --optimizer sgd"},
		{[]string{"--optimizer", "momentum", "--eps", "1e-6"}, "--eps does nothing with --optimizer momentum"},
		{[]string{"--optimizer", "adam", "--betas", "0.9"}, "--betas \"0.9\": want two numbers B1,B2"},
		{[]string{"--optimizer", "adam", "--betas", "1,0.9"}, "betas[0] = 1: want a number in [0, 1)"},
		{[]string{"--nesterov"}, "Nesterov momentum needs momentum > 0 and dampening 0"},
		{[]string{"--optimizer", "momentum", "--nesterov", "--dampening", "0.1"}, "Nesterov momentum needs"},
		{[]string{"--weight-decay", "-1"}, "weight decay -1: want a finite number >= 0"},
		{[]string{"--momentum", "NaN"}, "--momentum NaN: want a finite number"},
		{[]string{"--min-lr", "0.01"}, "--min-lr does nothing with --lr-schedule constant"},
		{[]string{"--lr-schedule", "cosine", "--lr-gamma", "0.5"}, "--lr-gamma does nothing with --lr-schedule cosine"},
		{[]string{"--lr-schedule", "linear", "--lr-step-size", "3"}, "--lr-step-size does nothing with --lr-schedule"},
		{[]string{"--lr-schedule", "step"}, "--lr-schedule step needs --lr-step-size"},
		{[]string{"--lr-schedule", "exp"}, "--lr-schedule \"exp\": want one of constant, cosine, linear, step"},
		{[]string{"--warmup-start-factor", "0.5"}, "--warmup-start-factor needs --warmup-steps"},
		{[]string{"--warmup-steps", "2", "--warmup-start-factor", "0"}, "LinearLR factors 0 and 1"},
		{[]string{"--lr-schedule", "cosine", "--warmup-steps", "10", "--steps", "10"}, "want more steps than warmup"},
		{[]string{"--lr-schedule", "linear", "--min-lr", "1", "--steps", "10"}, "want 0 <= min rate <= rate"},
		{[]string{"--clip-grad-norm", "-1"}, "--clip-grad-norm -1: want a number > 0 (0: off)"},
		{[]string{"--clip-grad-value", "Inf"}, "--clip-grad-value +Inf: want a finite number"},
		{[]string{"--clip-grad-norm", "1", "--clip-grad-value", "1"}, "give one of them"},
		{[]string{"--zero-overlap", "yes"}, "--zero-overlap \"yes\": want off, interleaved"},
		{[]string{"--zero-overlap", "interleaved"}, "--zero-overlap interleaved needs --zero"},
		{[]string{"--zero", "--zero-overlap", "deferred", "--clip-grad-norm", "1"}, "--zero-overlap and --clip-grad-norm"},
		{[]string{"--zero", "--zero-overlap", "interleaved", "--on-nonfinite", "skip"}, "--on-nonfinite skip: a step"},
		{[]string{"--zero", "--zero-overlap", "interleaved", "--find-unused-parameters"}, "needs every parameter"},
		{[]string{"--zero", "--zero-reduce-to-owners"}, "--zero-reduce-to-owners needs --zero --zero-overlap"},
		{[]string{"--zero", "--zero-overlap", "deferred", "--zero-reduce-to-owners", "--comm-hook", "fp16"},
			"replaces the comm hook"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, err := parseFlags(append([]string{"--backend", "local"}, c.args...), io.Discard)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v: want a usage error saying %q", err, c.want)
			}
		})
	}
}

// Every optimizer, schedule and clipping flag works with --engine gomlx
// too: both engines step with package optim (Note [engines]).
func TestOptimFlagsAcceptedByGoMLX(t *testing.T) {
	for _, a := range [][]string{{"--momentum", "0.5"}, {"--dampening", "0.1"}, {"--nesterov", "--momentum", "0.5"},
		{"--weight-decay", "0.1"}, {"--optimizer", "adam", "--betas", "0.8,0.9"}, {"--optimizer", "adam", "--eps", "1e-6"},
		{"--lr-schedule", "cosine"}, {"--warmup-steps", "3"}, {"--lr-schedule", "cosine", "--min-lr", "0.01"},
		{"--lr-schedule", "step", "--lr-step-size", "2"}, {"--lr-schedule", "step", "--lr-step-size", "2", "--lr-gamma", "1"},
		{"--clip-grad-norm", "1"}, {"--clip-grad-value", "1"}} {
		if _, err := parseFlags(append([]string{"--backend", "local", "--engine", "gomlx"}, a...), io.Discard); err != nil {
			t.Errorf("%v: %v", a, err)
		}
	}
}

// The flags that are given build what they say, and the others take the
// optimizer's defaults: AdamW's weight decay 0.01, momentum's 0.9.
func TestOptimFlagsBuild(t *testing.T) {
	for _, c := range []struct {
		args []string
		want map[string]float64 // the optimizer's hyperparameters, as optim reports them
	}{
		{[]string{"--optimizer", "momentum"}, nil},
		{[]string{"--optimizer", "adamw", "--betas", "0.8, 0.95", "--eps", "1e-6"}, nil},
		{[]string{"--optimizer", "sgd", "--momentum", "0.5", "--nesterov", "--weight-decay", "0.1"}, nil},
	} {
		cfg, err := parseFlags(append([]string{"--backend", "local"}, c.args...), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		o, err := cfg.optimizerOptions()
		if err != nil {
			t.Fatal(err)
		}
		if (o.Betas != nil) != cfg.given("betas") || (o.Momentum != nil) != cfg.given("momentum") ||
			(o.WeightDecay != nil) != cfg.given("weight-decay") || (o.Eps != nil) != cfg.given("eps") {
			t.Errorf("%v: options %+v: want exactly the given fields set", c.args, o)
		}
		if o.Betas != nil && *o.Betas != [2]float64{0.8, 0.95} {
			t.Errorf("--betas 0.8, 0.95: %v", *o.Betas)
		}
		if _, err := cfg.newOptimizer(nil, []int{1, 1, 1}); err != nil {
			t.Errorf("%v: %v", c.args, err)
		}
	}
}

var lrRE = regexp.MustCompile(`"msg":"train","step":(\d+),.*?"lr":([0-9.e+-]+)`)

// The train lines carry the rate of the step they end: a warmup from
// lr/4 reaches lr at step 4, and StepLR halves it every 2 steps after.
func TestTrainLinesCarryTheRate(t *testing.T) {
	r := ddpTrain(t, args("--steps", "8", "--log-every", "1", "--lr", "0.4", "--lr-schedule", "step",
		"--lr-step-size", "2", "--lr-gamma", "0.5", "--warmup-steps", "4", "--warmup-start-factor", "0.25")...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	// torch: LinearLR(0.25, 1, 4) for steps 1-4, then StepLR(2, 0.5) from its epoch 0.
	want := []float64{0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.2, 0.2}
	got := map[int]float64{}
	for _, m := range lrRE.FindAllStringSubmatch(r.stderr, -1) {
		step, _ := strconv.Atoi(m[1])
		got[step], _ = strconv.ParseFloat(m[2], 64)
	}
	for i, w := range want {
		if g, ok := got[i+1]; !ok || strings.TrimRight(strconv.FormatFloat(g, 'f', 12, 64), "0") !=
			strings.TrimRight(strconv.FormatFloat(w, 'f', 12, 64), "0") {
			t.Errorf("step %d: lr %v (logged: %v), want %v", i+1, g, ok, w)
		}
	}
}
