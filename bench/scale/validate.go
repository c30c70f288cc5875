package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goddp/ddp/bench/scale/model"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/internal/wiring/cli"
)

// validateOpts are validate's flags.
type validateOpts struct {
	ddpTrain, out, hidden string
	rates, hooks          []string
	perHost               []int
	repeats, steps, skip  int
	batch                 int
	budget                time.Duration
}

// config is one measured configuration.
type config struct {
	rate    string
	perHost int
	hook    string
}

// sample is one run of a configuration: its measured median step and
// the model's prediction from the same repeat's compute-only run.
type sample struct {
	measured float64
	pred     model.Prediction
}

func parseValidate(args []string, stderr io.Writer) (validateOpts, error) {
	fs := cli.FlagSet("scale validate", stderr)
	var o validateOpts
	var rates, hooks, perHost string
	fs.StringVar(&o.ddpTrain, "ddp-train", "", "the ddp-train binary to run on the hosts (go build -o /tmp/ddp-train ./cmd/ddp-train)")
	fs.StringVar(&o.out, "out", "", "directory for the runs' traces and logs (default: a new temporary one)")
	fs.StringVar(&rates, "rates", "1gbit,100mbit", "link caps, comma-separated")
	fs.StringVar(&hooks, "hooks", "allreduce,fp16,powersgd,hierarchical", "ddp-train comm hooks; hierarchical runs only with several ranks per host")
	fs.StringVar(&perHost, "ranks-per-host", "1,2", "ranks per host (two hosts), comma-separated")
	fs.StringVar(&o.hidden, "hidden", "1024,1024", "ddp-train --hidden")
	fs.IntVar(&o.batch, "batch-size", 32, "ddp-train --batch-size")
	fs.IntVar(&o.repeats, "repeats", 3, "rounds over every configuration, interleaved")
	fs.IntVar(&o.steps, "steps", 30, "steps per run")
	fs.IntVar(&o.skip, "skip", 8, "steps at the start of each run left out of its median")
	fs.DurationVar(&o.budget, "calibrate-budget", 2*time.Second, "time per size of the calibration's allreduces")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	o.rates, o.hooks = strings.Split(rates, ","), strings.Split(hooks, ",")
	var err error
	if o.perHost, err = cli.ParseInts(perHost); err != nil {
		return o, cli.Usage(fmt.Errorf("--ranks-per-host: %w", err))
	}
	if o.ddpTrain == "" {
		return o, cli.Usage(errors.New("--ddp-train: name the ddp-train binary"))
	}
	if o.steps < o.skip+5 {
		return o, cli.Usage(fmt.Errorf("--steps %d: want at least --skip + 5", o.steps))
	}
	return o, nil
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	o, err := parseValidate(args, stderr)
	if err != nil {
		return err
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "scale-validate-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	j, err := newBedJob(ctx, 2, o.out, nil)
	if err != nil {
		return err
	}
	defer j.Close()
	start := time.Now()
	intra, inter, err := calibrateAll(ctx, j, o, stdout)
	if err != nil {
		return err
	}
	res, order, err := measureAll(ctx, j, o, intra, inter, stdout)
	if err != nil {
		return err
	}
	report(stdout, o, res, order)
	fmt.Fprintf(stdout, "\n# %d repeats in %v; traces and logs in %s\n", o.repeats, time.Since(start).Round(time.Second), o.out)
	return nil
}

func calibrateAll(ctx context.Context, j *bedJob, o validateOpts, w io.Writer) (model.Link, map[string]model.Link, error) {
	c, err := calibrate(ctx, j, "", true, o.budget)
	if err != nil {
		return model.Link{}, nil, err
	}
	fmt.Fprintf(w, "# calibration, intra-host (loopback TCP in one namespace): %v\n", c)
	intra := c.link()
	inter := map[string]model.Link{}
	for _, r := range o.rates {
		c, err := calibrate(ctx, j, r, false, o.budget)
		if err != nil {
			return intra, nil, err
		}
		fmt.Fprintf(w, "# calibration, between hosts at %s: %v\n", r, c)
		inter[r] = c.link()
	}
	return intra, inter, nil
}

// measureAll runs every configuration o.repeats times, interleaved: per
// repeat, per rate, per ranks-per-host, a compute-only run (--comm-hook
// noop) and then each hook.
func measureAll(ctx context.Context, j *bedJob, o validateOpts, intra model.Link, inter map[string]model.Link, w io.Writer) (map[config][]sample, []config, error) {
	res := map[config][]sample{}
	var order []config
	shapes, err := mlpShapes(fmt.Sprintf("%d,%s,%d", dataset.SyntheticD, o.hidden, dataset.SyntheticClasses))
	if err != nil {
		return nil, nil, err
	}
	for rep := range o.repeats {
		for _, rate := range o.rates {
			if err := j.setRate(ctx, rate); err != nil {
				return nil, nil, err
			}
			for _, k := range o.perHost {
				name := fmt.Sprintf("r%d-%s-%dx%d", rep, rate, j.hosts, k)
				prof, noop, err := ddpRun(ctx, j, o, k, "noop", name, shapes)
				if err != nil {
					return nil, nil, err
				}
				fmt.Fprintf(w, "# %s noop: step %.1f ms (forward %.1f, backward %.1f, other %.1f)\n", name, noop*1e3,
					prof.Forward*1e3, prof.Backward*1e3, prof.Other*1e3)
				c := model.Cluster{Hosts: j.hosts, RanksPerHost: k, Inter: inter[rate], Intra: intra}
				for _, h := range o.hooks {
					if h == "hierarchical" && k == 1 {
						continue
					}
					_, step, err := ddpRun(ctx, j, o, k, h, name, shapes)
					if err != nil {
						return nil, nil, err
					}
					a, mh := modelOf(h)
					cf := config{rate, k, h}
					if rep == 0 {
						order = append(order, cf)
					}
					res[cf] = append(res[cf], sample{step, model.Predict(prof, c, a, mh)})
					fmt.Fprintf(w, "# %s %s: step %.1f ms, predicted %.1f ms\n", name, h, step*1e3, res[cf][rep].pred.Step*1e3)
				}
			}
		}
	}
	return res, order, nil
}

// modelOf is the algorithm and hook of the model for a ddp-train hook
// run with --shm=false: pg/tcp's choice by size, or the hierarchical
// hook's reduce, leaders' allreduce and broadcast.
func modelOf(hook string) (model.Algorithm, model.Hook) {
	switch hook {
	case "fp16":
		return model.Auto, model.Hook{Kind: model.FP16}
	case "bf16":
		return model.Auto, model.Hook{Kind: model.BF16}
	case "powersgd":
		return model.Auto, model.Hook{Kind: model.PowerSGD, Rank: 1}
	case "hierarchical":
		return model.Hierarchical, model.Hook{Kind: model.Allreduce}
	}
	return model.Auto, model.Hook{Kind: model.Allreduce}
}

// ddpRun runs ddp-train with hook on 2 hosts × perHost ranks and returns
// rank 0's profile and median step period (seconds), from its trace.
func ddpRun(ctx context.Context, j *bedJob, o validateOpts, perHost int, hook, name string, shapes []model.Param) (model.Profile, float64, error) {
	dir := filepath.Join(o.out, name+"-"+hook)
	argv := []string{o.ddpTrain, "--backend", "tcp", "--shm=false", "--hidden", o.hidden,
		"--batch-size", strconv.Itoa(o.batch), "--steps", strconv.Itoa(o.steps), "--comm-hook", hook,
		"--powersgd-start-iter", "2", "--timeline", dir, "--log-level", "warn", "--log-format", "json",
		"--check-replicas-every", "0", "--find-nonfinite-origin=false", "--timeout", "2m"}
	if _, err := j.run(ctx, perHost, 3*time.Minute, name+"-"+hook, argv...); err != nil {
		return model.Profile{}, 0, err
	}
	t, err := readTrace(filepath.Join(dir, "rank-0.json"))
	if err != nil {
		return model.Profile{}, 0, err
	}
	return t.profile(o.skip, shapes)
}

func report(w io.Writer, o validateOpts, res map[config][]sample, order []config) {
	fmt.Fprintf(w, "\n| link | ranks | hook | measured ms (median, min–max) | predicted ms | error | comm predicted ms | hidden predicted |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|\n")
	for _, c := range order {
		ss := res[c]
		var m, p, comm, hid []float64
		for _, s := range ss {
			m, p = append(m, s.measured), append(p, s.pred.Step)
			comm, hid = append(comm, s.pred.Comm), append(hid, s.pred.Hidden)
		}
		lo, hi := minMax(m)
		fmt.Fprintf(w, "| %s | 2×%d | %s | %.1f (%.1f–%.1f) | %.1f | %+.0f%% | %.1f | %.0f%% |\n", c.rate, c.perHost, c.hook,
			median(m)*1e3, lo*1e3, hi*1e3, median(p)*1e3, (median(p)/median(m)-1)*100, median(comm)*1e3, median(hid)*100)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nspeedup over allreduce\tlink\tranks\tmeasured\tpredicted\n")
	for _, c := range order {
		base, ok := res[config{c.rate, c.perHost, "allreduce"}]
		if !ok || c.hook == "allreduce" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t2×%d\t%.2f×\t%.2f×\n", c.hook, c.rate, c.perHost,
			medianOf(base, true)/medianOf(res[c], true), medianOf(base, false)/medianOf(res[c], false))
	}
	_ = tw.Flush()
}

func medianOf(ss []sample, measured bool) float64 {
	var v []float64
	for _, s := range ss {
		if measured {
			v = append(v, s.measured)
		} else {
			v = append(v, s.pred.Step)
		}
	}
	return median(v)
}

func minMax(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}
