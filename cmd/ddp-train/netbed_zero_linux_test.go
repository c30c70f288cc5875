package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
)

// TestNetbedZeroOverlapFigures measures, for docs/optimizers.md, what
// --zero-overlap gains or loses where the links are slow: 2 hosts of a
// network-namespace bed, their links capped at GODDP_ZERO_OVERLAP_RATE
// (default "1gbit,100mbit", one after the other; GODDP_ZERO_OVERLAP_BURST
// sets the token bucket, see setRate), GODDP_ZERO_OVERLAP_NPROC ranks per
// host (default "1,2"), Adam on --hidden GODDP_ZERO_OVERLAP_HIDDEN
// (default 512,512,512: 0.56M float32 parameters, 2.2 MB of gradients in
// DDP's default two buckets), GODDP_ZERO_OVERLAP_EXTRA added to every
// run's flags (for example --batch-size 512), the five modes of
// TestZeroOverlapFigures interleaved round by round
// (GODDP_ZERO_OVERLAP_ROUNDS, default 3). Per run it reads the --summary,
// rank 0's --timeline (per step: the iteration, the time from the end of
// backward to the end of DDP's wait, and to the start of the next step)
// and the "train" lines' comm_fraction; per mode, the bytes each host's
// link sent per step, the difference between a full run and a 2-step one.
// Every run must end with the same parameters on every rank, and every
// mode but --zero-reduce-to-owners bitwise where the run without ZeRO
// ends. It runs only with GODDP_TEST_NETBED=1 (as root) and
// GODDP_ZERO_OVERLAP_FIGURES=1: it is a measurement, not a check.
func TestNetbedZeroOverlapFigures(t *testing.T) {
	if os.Getenv("GODDP_ZERO_OVERLAP_FIGURES") != "1" {
		t.Skip("a measurement: set GODDP_ZERO_OVERLAP_FIGURES=1 (and GODDP_TEST_NETBED=1, as root)")
	}
	netbedOrSkip(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &zeroNetEnv{bed: newNetbed(t, 2), self: self, dir: t.TempDir(),
		hidden: cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_HIDDEN"), "512,512,512"),
		extra:  strings.Fields(os.Getenv("GODDP_ZERO_OVERLAP_EXTRA"))}
	e.rounds, _ = strconv.Atoi(cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_ROUNDS"), "3"))
	for _, rate := range splitList(cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_RATE"), "1gbit,100mbit")) {
		e.setRate(t, rate)
		for _, n := range splitList(cmp.Or(os.Getenv("GODDP_ZERO_OVERLAP_NPROC"), "1,2")) {
			e.nproc, e.steps = mustAtoi(n), zeroNetSteps(rate)
			t.Log(e.measure(t))
		}
	}
}

// setRate caps both hosts' links at rate. With GODDP_ZERO_OVERLAP_BURST
// (tc's units, "64kb"), what each host sends passes a token bucket of that
// size in place of the bed's (10 ms of the rate): at 1gbit the bed's
// bucket holds 1.25 MB, as much as a gradient bucket, so a transfer after
// an idle spell passes faster than the rate.
func (e *zeroNetEnv) setRate(t *testing.T, rate string) {
	t.Helper()
	e.rate, e.burst = rate, os.Getenv("GODDP_ZERO_OVERLAP_BURST")
	for i, h := range e.bed.Hosts() {
		if err := e.bed.SetRate(context.Background(), i, rate); err != nil {
			t.Fatal(err)
		}
		if e.burst == "" {
			continue
		}
		out, err := exec.Command("ip", "netns", "exec", h.NS, "tc", "qdisc", "replace", "dev", h.Link, "root",
			"tbf", "rate", rate, "burst", e.burst, "latency", "400ms").CombinedOutput()
		if err != nil {
			t.Fatalf("tc qdisc replace dev %s root tbf rate %s burst %s: %v: %s", h.Link, rate, e.burst, err, out)
		}
	}
}

// zeroNetSteps is a run's steps at rate: a run trains for seconds, not
// minutes (GODDP_ZERO_OVERLAP_STEPS overrides).
func zeroNetSteps(rate string) int {
	if s := os.Getenv("GODDP_ZERO_OVERLAP_STEPS"); s != "" {
		return mustAtoi(s)
	}
	if strings.HasSuffix(rate, "gbit") {
		return 200
	}
	return 50
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// zeroNetMode is one way to train: a name and the flags that make it.
type zeroNetMode struct {
	name  string
	flags []string
}

func zeroNetModes() []zeroNetMode {
	return []zeroNetMode{
		{"no ZeRO", nil},
		{"--zero", []string{"--zero"}},
		{"--zero-overlap interleaved", []string{"--zero", "--zero-overlap", "interleaved"}},
		{"--zero-overlap deferred", []string{"--zero", "--zero-overlap", "deferred"}},
		{"interleaved --zero-reduce-to-owners", []string{"--zero", "--zero-overlap", "interleaved",
			"--zero-reduce-to-owners"}},
	}
}

// zeroNetEnv is the bed and what the runs on it share.
type zeroNetEnv struct {
	bed         *netbed.Bed
	self, dir   string
	hidden      string
	extra       []string // GODDP_ZERO_OVERLAP_EXTRA
	rounds      int
	rate, burst string // the links' cap, and the token bucket of what each host sends ("": the bed's)
	nproc       int
	steps       int
	seq         int // runs so far: each gets a port and a directory of its own
	buckets     int // buckets in rank 0's trace, the last run's
	bucketBytes []int64
}

// zeroNetRun is what one run measured.
type zeroNetRun struct {
	sps, wall        float64 // --summary's samples_per_sec and wall_seconds
	iter, wait, tail float64 // rank 0's medians over steps, in ms: iteration, backward end to DDP's wait end, to next step
	commFraction     float64 // median over rank 0's "train" lines
	sent             int64   // bytes sent by both hosts' links
	digest           string  // rank 0's final parameters
}

// zeroNetStats collects one mode's runs.
type zeroNetStats struct {
	sps, ratio, wall, iter, wait, tail, comm []float64
	sent, calib                              int64
	digests                                  []string
	failed                                   string
}

// measure runs every mode, round by round, and returns the markdown table.
func (e *zeroNetEnv) measure(t *testing.T) string {
	modes := zeroNetModes()
	st := make([]zeroNetStats, len(modes))
	for i, m := range modes { // the calibration: a 2-step run's bytes are setup, not steps
		r, err := e.run(t, m, 2)
		if err != nil {
			st[i].failed = e.fail(t, m, err)
			continue
		}
		st[i].calib = r.sent
	}
	for round := range e.rounds {
		base := 0.0
		for i, m := range modes {
			if st[i].failed != "" {
				continue
			}
			r, err := e.run(t, m, e.steps)
			if err != nil {
				st[i].failed = e.fail(t, m, err)
				continue
			}
			if i == 0 {
				base = r.sps
			}
			s := &st[i]
			s.sps, s.wall, s.iter = append(s.sps, r.sps), append(s.wall, r.wall), append(s.iter, r.iter)
			s.wait, s.tail, s.comm = append(s.wait, r.wait), append(s.tail, r.tail), append(s.comm, r.commFraction)
			s.digests = append(s.digests, r.digest)
			if round == 0 {
				s.sent = r.sent
			}
			if base > 0 {
				s.ratio = append(s.ratio, r.sps/base)
			}
		}
	}
	e.checkDigests(t, modes, st)
	return e.table(modes, st)
}

// fail records a mode's failure, which is not measured again at this
// rate and layout: what it said, and how to run it again.
func (e *zeroNetEnv) fail(t *testing.T, m zeroNetMode, err error) string {
	t.Errorf("%s at %s, 2 hosts x %d ranks: %v\nrerun: GODDP_TEST_NETBED=1 GODDP_ZERO_OVERLAP_FIGURES=1 "+
		"GODDP_ZERO_OVERLAP_RATE=%s GODDP_ZERO_OVERLAP_BURST=%q GODDP_ZERO_OVERLAP_NPROC=%d GODDP_ZERO_OVERLAP_STEPS=%d "+
		"GODDP_ZERO_OVERLAP_HIDDEN=%s GODDP_ZERO_OVERLAP_EXTRA=%q go test ./cmd/ddp-train -run "+
		"'^TestNetbedZeroOverlapFigures$' -v -count=1", m.name, e.rate, e.nproc, err, e.rate, e.burst, e.nproc, e.steps,
		e.hidden, strings.Join(e.extra, " "))
	return err.Error()
}

// checkDigests wants every run of a mode to end at the same parameters,
// and --zero and the overlap without --zero-reduce-to-owners at those of
// the run without ZeRO (Note [ZeRO overlapped with backward]: bitwise).
func (e *zeroNetEnv) checkDigests(t *testing.T, modes []zeroNetMode, st []zeroNetStats) {
	for i, m := range modes {
		for _, d := range st[i].digests {
			if d != st[i].digests[0] {
				t.Errorf("%s at %s, %d ranks per host: the rounds ended at parameters %v; want one digest", m.name, e.rate,
					e.nproc, st[i].digests)
				break
			}
		}
		if slices.Contains(m.flags, "--zero-reduce-to-owners") || len(st[i].digests) == 0 || len(st[0].digests) == 0 {
			continue
		}
		if st[i].digests[0] != st[0].digests[0] {
			t.Errorf("%s at %s, %d ranks per host: parameters %s, without ZeRO %s; want bitwise equal", m.name, e.rate,
				e.nproc, st[i].digests[0], st[0].digests[0])
		}
	}
}

// table is the figures of one rate and layout, in markdown.
func (e *zeroNetEnv) table(modes []zeroNetMode, st []zeroNetStats) string {
	var b strings.Builder
	burst := cmp.Or(e.burst, "10 ms")
	fmt.Fprintf(&b, "\n%s links (burst %s), 2 hosts x %d rank(s), --hidden %s, Adam, %d steps x batch %s per rank, "+
		"%d rounds, %d buckets %v bytes; extra flags %q\n\n", e.rate, burst, e.nproc, e.hidden, e.steps,
		lastFlag(e.extra, "--batch-size", "32"), e.rounds, e.buckets, e.bucketBytes, strings.Join(e.extra, " "))
	b.WriteString("| mode | samples/s | / no ZeRO | wall s | iteration ms | backward end → DDP's wait end ms | " +
		"backward end → next step ms | comm_fraction | MB sent per step per host |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for i, m := range modes {
		s := st[i]
		if len(s.sps) == 0 {
			fmt.Fprintf(&b, "| %s | failed: %s |  |  |  |  |  |  |  |\n", m.name, firstLine(s.failed))
			continue
		}
		perStep := float64(s.sent-s.calib) / float64(max(e.steps-2, 1)) / 2 / 1e6
		fmt.Fprintf(&b, "| %s | %.0f | %.3f | %.2f | %.1f | %.1f | %.1f | %.3f | %.2f |\n", m.name, median(s.sps),
			medianOr(s.ratio), median(s.wall), median(s.iter), median(s.wait), median(s.tail), median(s.comm), perStep)
	}
	return b.String()
}

// lastFlag is the value of the last "name value" in flags, or def.
func lastFlag(flags []string, name, def string) string {
	for i := len(flags) - 2; i >= 0; i-- {
		if flags[i] == name {
			return flags[i+1]
		}
	}
	return def
}

func medianOr(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	return median(x)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.ReplaceAll(line, "|", "/")
}

// run trains mode m for steps steps across the bed and measures it.
func (e *zeroNetEnv) run(t *testing.T, m zeroNetMode, steps int) (zeroNetRun, error) {
	t.Helper()
	e.seq++
	dir := filepath.Join(e.dir, strconv.Itoa(e.seq))
	sum, trace := filepath.Join(dir, "summary.json"), filepath.Join(dir, "timeline")
	train := slices.Concat([]string{"--backend", "tcp", "--hidden", e.hidden, "--optimizer", "adam", "--steps",
		strconv.Itoa(steps), "--batch-size", "32", "--samples", "2048", "--log-format", "json", "--log-every", "10",
		"--timeout", "60s", "--summary", sum, "--timeline", trace}, e.extra, m.flags)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := e.sentBytes()
	if err != nil {
		return zeroNetRun{}, err
	}
	log, err := e.launch(t, train)
	if err != nil {
		return zeroNetRun{}, err
	}
	after, err := e.sentBytes()
	if err != nil {
		return zeroNetRun{}, err
	}
	r := zeroNetRun{sent: after - before}
	s := readSummary(t, sum)
	r.sps, r.wall = s.SamplesPerSec, s.WallSeconds
	r.commFraction = commFraction(log)
	d := digests(log)
	if len(d) != 2*e.nproc {
		return r, fmt.Errorf("%d ranks reported their final parameters, want %d:\n%s", len(d), 2*e.nproc, log)
	}
	for rank, v := range d {
		if v != d["0"] {
			return r, fmt.Errorf("rank %s ended at %s, rank 0 at %s:\n%s", rank, v, d["0"], log)
		}
	}
	r.digest = d["0"]
	if r.iter, r.wait, r.tail, err = e.readTrace(filepath.Join(trace, "rank-0.json")); err != nil {
		return r, err
	}
	t.Logf("%s %s %dx%d, %d steps: %.0f samples/s, %.2f s, iteration %.1f ms, wait %.1f ms, tail %.1f ms, "+
		"comm_fraction %.3f, %d bytes sent", e.rate, m.name, 2, e.nproc, steps, r.sps, r.wall, r.iter, r.wait, r.tail,
		r.commFraction, r.sent)
	return r, nil
}

// launch starts ddp-train as its own launcher on both hosts (--nnodes 2
// --nproc e.nproc), waits at most 3 minutes and returns their output; an
// error, with the output, where either failed.
func (e *zeroNetEnv) launch(t *testing.T, train []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cleanEnv("GODDP_SECRET=" + netbedSecret(t))
	port := strconv.Itoa(29800 + 10*e.seq%4000)
	outs := make([]lockedBuffer, 2)
	errs := make([]error, 2)
	argvs := make([][]string, 2)
	var wg sync.WaitGroup
	for h := range 2 {
		argvs[h] = append([]string{"--nnodes", "2", "--node-rank", strconv.Itoa(h), "--master-addr", "node0",
			"--master-port", port, "--nproc", strconv.Itoa(e.nproc)}, train...)
		cmd := e.bed.Command(ctx, h, e.self, argvs[h]...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = &outs[h], &outs[h]
		if err := cmd.Start(); err != nil {
			cancel()
			wg.Wait()
			return "", err
		}
		wg.Go(func() {
			if errs[h] = cmd.Wait(); errs[h] != nil {
				errs[h] = fmt.Errorf("node%d: %w", h, errs[h])
				cancel()
			}
		})
	}
	wg.Wait()
	var all strings.Builder
	for h := range 2 {
		fmt.Fprintf(&all, "--- node%d: ddp-train %s\n%s", h, strings.Join(argvs[h], " "), outs[h].String())
	}
	if err := errors.Join(errs...); err != nil {
		return all.String(), fmt.Errorf("%w\n%s", err, all.String())
	}
	return all.String(), nil
}

// sentBytes is the bytes both hosts' links have sent, as the kernel
// counts them (ip -s link).
func (e *zeroNetEnv) sentBytes() (int64, error) {
	var total int64
	for _, h := range e.bed.Hosts() {
		out, err := exec.Command("ip", "-n", h.NS, "-s", "-j", "link", "show", "dev", h.Link).Output()
		if err != nil {
			return 0, fmt.Errorf("ip -n %s -s -j link show dev %s: %w", h.NS, h.Link, err)
		}
		var links []struct {
			Stats struct {
				TX struct {
					Bytes int64 `json:"bytes"`
				} `json:"tx"`
			} `json:"stats64"`
		}
		if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
			return 0, fmt.Errorf("ip -s -j link show dev %s: %q: %v", h.Link, out, err)
		}
		total += links[0].Stats.TX.Bytes
	}
	return total, nil
}

var trainCommRE = regexp.MustCompile(`"msg":"train".*"comm_fraction":([0-9.eE+-]+)`)

// commFraction is the median comm_fraction of the "train" lines.
func commFraction(log string) float64 {
	var v []float64
	for _, m := range trainCommRE.FindAllStringSubmatch(log, -1) {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			v = append(v, f)
		}
	}
	return medianOr(v)
}

// traceEvent is one event of a --timeline file.
type traceEvent struct {
	Ph   string  `json:"ph"`
	Name string  `json:"name"`
	Tid  int     `json:"tid"`
	Ts   float64 `json:"ts"`
	Dur  float64 `json:"dur"`
	Args struct {
		Bucket int64 `json:"bucket"`
		Bytes  int64 `json:"bytes"`
	} `json:"args"`
}

// readTrace reads rank 0's trace: per step (the first two left out: the
// buckets are rebuilt after the first), the medians in ms of the
// iteration (one step's start to the next's), of the end of backward to
// the end of the step slice (DDP's wait for the buckets: with the
// overlap, their owners' steps and broadcasts too) and of the end of
// backward to the start of the next step (everything after backward: the
// wait, --zero's step and broadcasts, the logging, the next batch).
func (e *zeroNetEnv) readTrace(path string) (iter, wait, tail float64, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	var events []traceEvent
	if err := json.Unmarshal(raw, &events); err != nil {
		if err := json.Unmarshal(append(bytes.TrimRight(raw, ",\n"), ']'), &events); err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	var steps, bwd []traceEvent
	bucketBytes := map[int64]int64{}
	for _, ev := range events {
		switch {
		case ev.Ph != "X":
		case ev.Name == "step":
			steps = append(steps, ev)
		case ev.Name == "backward":
			bwd = append(bwd, ev)
		case ev.Name == "communication":
			bucketBytes[ev.Args.Bucket] = ev.Args.Bytes
		}
	}
	byStart := func(a, b traceEvent) int { return cmp.Compare(a.Ts, b.Ts) }
	slices.SortFunc(steps, byStart)
	slices.SortFunc(bwd, byStart)
	if len(steps) != len(bwd) || len(steps) < 2 {
		return 0, 0, 0, fmt.Errorf("%s: %d steps, %d backwards", path, len(steps), len(bwd))
	}
	var its, waits, tails []float64
	for i := min(2, len(steps)-2); i+1 < len(steps); i++ {
		end := bwd[i].Ts + bwd[i].Dur
		its = append(its, (steps[i+1].Ts-steps[i].Ts)/1e3)
		waits = append(waits, (steps[i].Ts+steps[i].Dur-end)/1e3)
		tails = append(tails, (steps[i+1].Ts-end)/1e3)
	}
	e.buckets, e.bucketBytes = len(bucketBytes), nil
	for b := range int64(len(bucketBytes)) {
		e.bucketBytes = append(e.bucketBytes, bucketBytes[b])
	}
	return median(its), median(waits), median(tails), nil
}
