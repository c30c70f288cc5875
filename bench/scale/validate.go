package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
)

// validateOpts are validate's flags.
type validateOpts struct {
	ddpTrain, out, hidden string
	analyze               string
	rates, hooks          []string
	perHost               []int
	repeats, steps, skip  int
	batch                 int
	budget                time.Duration
}

func parseValidate(args []string, stderr io.Writer) (validateOpts, error) {
	fs := cli.FlagSet("scale validate", stderr)
	var o validateOpts
	var rates, hooks, perHost string
	fs.StringVar(&o.ddpTrain, "ddp-train", "",
		"the ddp-train binary to run on the hosts (go build -o /tmp/ddp-train ./cmd/ddp-train)")
	fs.StringVar(&o.analyze, "analyze", "",
		"print the table of an earlier validation's directory (its record.json and traces) instead of measuring")
	fs.StringVar(&o.out, "out", "", "directory for the runs' traces and logs (default: a new temporary one)")
	fs.StringVar(&rates, "rates", "none,1gbit,100mbit",
		"link caps, comma-separated; none (uncapped) also gives each hook's overhead (see report)")
	fs.StringVar(&hooks, "hooks", "allreduce,fp16,powersgd,hierarchical", "ddp-train comm hooks, run with --shm=false; "+
		"a +shm suffix (allreduce+shm) runs one with --shm=true, which makes pg/tcp's allreduce hierarchical through "+
		"shared memory; hierarchical and +shm run only with several ranks per host")
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
	if o.ddpTrain == "" && o.analyze == "" {
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
	if o.analyze != "" {
		return analyze(o.analyze, stdout)
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "scale-validate-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	j, err := newBedJob(ctx, 2, o.out, nil)
	if err != nil {
		return err
	}
	defer j.Close()
	start := time.Now()
	cal, err := calibrateAll(ctx, j, o, stdout)
	if err != nil {
		return err
	}
	rec := record{Calibration: cal, Hidden: o.hidden, Hosts: j.hosts}
	if err := measureAll(ctx, j, o, &rec, stdout); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(o.out, "record.json"), rec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %d repeats in %v; traces, logs and record.json in %s\n", o.repeats,
		time.Since(start).Round(time.Second), o.out)
	return analyze(o.out, stdout)
}

// record is what a validation measured, saved as DIR/record.json so that
// 'scale validate --analyze DIR' can print the table again.
type record struct {
	Calibration calibrations
	Hidden      string // ddp-train --hidden
	Hosts       int
	Skip        int
	Runs        []runRecord
}

// calibrations are the links' α and β.
type calibrations struct {
	Intra    scalemodel.Link
	IntraShm scalemodel.Link            // shared memory; zero unless a hook ran with +shm
	Inter    map[string]scalemodel.Link // by rate
}

// runRecord is one ddp-train run: its configuration and trace directory.
type runRecord struct {
	Repeat  int
	Rate    string
	PerHost int
	Hook    string
	Dir     string // relative to the record's directory
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func calibrateAll(ctx context.Context, j *bedJob, o validateOpts, w io.Writer) (calibrations, error) {
	cal := calibrations{Inter: map[string]scalemodel.Link{}}
	c, err := calibrate(ctx, j, "", true, false, o.budget)
	if err != nil {
		return cal, err
	}
	fmt.Fprintf(w, "# calibration, intra-host (loopback TCP in one namespace): %v\n", c)
	cal.Intra = c.link()
	if slices.ContainsFunc(o.hooks, func(h string) bool { return strings.HasSuffix(h, shmSuffix) }) {
		c, err := calibrate(ctx, j, "", true, true, o.budget)
		if err != nil {
			return cal, err
		}
		fmt.Fprintf(w, "# calibration, intra-host (shared memory): %v\n", c)
		cal.IntraShm = c.link()
	}
	for _, r := range o.rates {
		c, err := calibrate(ctx, j, rateArg(r), false, false, o.budget)
		if err != nil {
			return cal, err
		}
		fmt.Fprintf(w, "# calibration, between hosts at %s: %v\n", r, c)
		cal.Inter[r] = c.link()
	}
	return cal, nil
}

// measureAll runs every configuration o.repeats times, interleaved: per
// repeat, per rate, per ranks-per-host, a compute-only run (--comm-hook
// noop) and then each hook.
func measureAll(ctx context.Context, j *bedJob, o validateOpts, rec *record, w io.Writer) error {
	rec.Skip = o.skip
	for rep := range o.repeats {
		for _, rate := range o.rates {
			if err := j.setRate(ctx, rateArg(rate)); err != nil {
				return err
			}
			for _, k := range o.perHost {
				for _, h := range append([]string{"noop"}, o.hooks...) {
					if (h == "hierarchical" || strings.HasSuffix(h, shmSuffix)) && k == 1 { // the same as allreduce
						continue
					}
					name := fmt.Sprintf("r%d-%s-%dx%d-%s", rep, rate, j.hosts, k, h)
					if err := ddpRun(ctx, j, o, k, h, name); err != nil {
						return err
					}
					rec.Runs = append(rec.Runs, runRecord{rep, rate, k, h, name})
					t, err := readTrace(filepath.Join(o.out, name, "rank-0.json"))
					if err != nil {
						return err
					}
					_, period, err := t.profile(o.skip, nil)
					if err != nil {
						return err
					}
					fmt.Fprintf(w, "# %s: step %.1f ms\n", name, period*1e3)
				}
			}
		}
	}
	return nil
}

// shmSuffix on a validate hook name runs it with ddp-train --shm=true:
// "allreduce+shm" is pg/tcp's own hierarchical allreduce, through shared
// memory within each host.
const shmSuffix = "+shm"

// modelOf is the algorithm and hook of the model for a ddp-train hook:
// pg/tcp's choice (auto), or the hierarchical hook's reduce, leaders'
// allreduce and broadcast.
func modelOf(hook string) (scalemodel.Algorithm, scalemodel.Hook) {
	switch strings.TrimSuffix(hook, shmSuffix) {
	case "fp16":
		return scalemodel.Auto, scalemodel.Hook{Kind: scalemodel.FP16}
	case "bf16":
		return scalemodel.Auto, scalemodel.Hook{Kind: scalemodel.BF16}
	case "powersgd":
		return scalemodel.Auto, scalemodel.Hook{Kind: scalemodel.PowerSGD, Rank: 1}
	case "hierarchical":
		return scalemodel.Hierarchical, scalemodel.Hook{Kind: scalemodel.Allreduce}
	}
	return scalemodel.Auto, scalemodel.Hook{Kind: scalemodel.Allreduce}
}

// ddpRun runs ddp-train with hook on 2 hosts × perHost ranks, writing
// its trace to OUT/name.
func ddpRun(ctx context.Context, j *bedJob, o validateOpts, perHost int, hook, name string) error {
	argv := []string{o.ddpTrain, "--backend", "tcp", "--shm=" + strconv.FormatBool(strings.HasSuffix(hook, shmSuffix)),
		"--hidden", o.hidden,
		"--batch-size", strconv.Itoa(o.batch), "--steps", strconv.Itoa(o.steps), "--comm-hook",
		strings.TrimSuffix(hook, shmSuffix),
		"--powersgd-start-iter", "2", "--timeline", filepath.Join(o.out, name), "--log-level", "warn", "--log-format", "json",
		"--check-replicas-every", "0", "--find-nonfinite-origin=false", "--timeout", "2m"}
	_, err := j.run(ctx, perHost, 3*time.Minute, name, argv...)
	return err
}
