package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
)

// TestNetbedDiLoCoFigures measures, for docs/diloco.md ("On slow
// links"), DDP against DiLoCo on a bed of 2 hosts × 2 ranks (ddp-train
// --nnodes 2 --nproc 2 on each) whose links are capped at each of
// GODDP_DILOCO_RATES (default 100mbit,1gbit), for each of
// GODDP_DILOCO_MODELS (mlp: --model mlp --hidden 512,512; cnn: LeNet) on
// MNIST, with Adam at 1e-3, 32 samples per rank per step,
// GODDP_DILOCO_STEPS optimizer steps (default 500) for every
// configuration. Per run: the training time, the step and time at which
// the logged training loss first falls below the model's target
// (GODDP_DILOCO_TARGETS, default mlp=0.25,cnn=0.25), the bytes each host's
// veth sent per step (its tx_bytes before and after, less a 1-step run's,
// which is the start-up and the final evaluation), the summary's
// diloco_bytes_sent per step, and the held-out (t10k) accuracy. A
// compute-only run (--comm-hook noop) per link and model leaves its
// timeline for bench/scale's profile, from which scale predict gives the
// predictions the docs set beside these. Everything is kept in
// GODDP_DILOCO_OUT (default a temporary directory): record.json, each
// run's log, summary and timeline. It is a measurement, not a check: it
// runs only with GODDP_TEST_NETBED=1 and GODDP_DILOCO_FIGURES=1, as root.
// GODDP_DILOCO_CONFIGS picks configurations by name (dilocoConfigs).
func TestNetbedDiLoCoFigures(t *testing.T) {
	if os.Getenv("GODDP_DILOCO_FIGURES") != "1" {
		t.Skip("a measurement on the network-namespace bed: set GODDP_TEST_NETBED=1 and GODDP_DILOCO_FIGURES=1 (root)")
	}
	netbedOrSkip(t)
	data := mnistDir(t)
	steps, err := strconv.Atoi(cmp.Or(os.Getenv("GODDP_DILOCO_STEPS"), "500"))
	if err != nil || steps < 2 {
		t.Fatalf("GODDP_DILOCO_STEPS %q: want a whole number ≥ 2", os.Getenv("GODDP_DILOCO_STEPS"))
	}
	targets := parseTargets(t, cmp.Or(os.Getenv("GODDP_DILOCO_TARGETS"), "mlp=0.25,cnn=0.25"))
	out := cmp.Or(os.Getenv("GODDP_DILOCO_OUT"), t.TempDir())
	b := newNetbed(t, 2)
	m := &dilocoBench{t: t, b: b, data: data, out: out, steps: steps, port: 31000}
	var runs []dilocoRecord
	for _, model := range strings.Split(cmp.Or(os.Getenv("GODDP_DILOCO_MODELS"), "mlp,cnn"), ",") {
		m.setRate("") // the bytes of start-up and evaluation do not depend on the link
		fixed := m.run("none", model, dilocoConfig{"fixed", []string{"--diloco-sync-every", "20"}}, 1, 0)
		runs = append(runs, fixed)
		for _, rate := range strings.Split(cmp.Or(os.Getenv("GODDP_DILOCO_RATES"), "100mbit,1gbit"), ",") {
			m.setRate(rate)
			for _, c := range dilocoConfigs(os.Getenv("GODDP_DILOCO_CONFIGS")) {
				r := m.run(rate, model, c, steps, targets[model])
				r.netOf(fixed)
				runs = append(runs, r)
				t.Logf("%s", r.row())
			}
		}
	}
	raw, err := json.MarshalIndent(runs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "record.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s\nrecord and logs in %s", dilocoTable(runs), out)
}

// dilocoConfig is one configuration: a name and its flags.
type dilocoConfig struct {
	name  string
	flags []string
}

// dilocoConfigs are the configurations of every link and model: the
// compute-only step, DDP, DiLoCo at H 20, 50 and 100 (outer Nesterov SGD
// at 0.7, momentum 0.9: the defaults), and Streaming DiLoCo at H 50 with
// 2 fragments in bf16, with a delay of one step and without (what the
// delay hides). names (comma-separated; "" for those) picks among them
// and two more, DiLoCo at H 5 with a delay of 0 and of 4 steps, where the
// model says the delay hides most of the reduction.
func dilocoConfigs(names string) []dilocoConfig {
	d := func(h string, extra ...string) []string { return append([]string{"--diloco-sync-every", h}, extra...) }
	all := []dilocoConfig{
		{"noop", []string{"--comm-hook", "noop", "--check-replicas-every", "0"}}, // the ranks drift apart
		{"ddp", nil},
		{"diloco-h20", d("20")},
		{"diloco-h50", d("50")},
		{"diloco-h100", d("100")},
		{"streaming-h50-f2-d1-bf16", d("50", "--diloco-fragments", "2", "--diloco-delay", "1",
			"--diloco-quantize", "bf16")},
		{"streaming-h50-f2-d0-bf16", d("50", "--diloco-fragments", "2", "--diloco-quantize", "bf16")},
		{"diloco-h5-d0", d("5")},
		{"diloco-h5-d4", d("5", "--diloco-delay", "4")},
		// docs/gomlx.md "Overlap with backward": one program per micro-batch
		// against one per layer, with buckets small enough to be several
		{"gomlx-one", []string{"--engine", "gomlx", "--bucket-cap-mb", "0.5"}},
		{"gomlx-per-layer", []string{"--engine", "gomlx", "--gomlx-programs", "per-layer", "--bucket-cap-mb", "0.5"}},
		{"gorgonia-small-buckets", []string{"--bucket-cap-mb", "0.5"}},
	}
	if names == "" {
		return all[:7] // the DDP and DiLoCo tables of docs/diloco.md
	}
	var out []dilocoConfig
	for _, c := range all {
		if slices.Contains(strings.Split(names, ","), c.name) {
			out = append(out, c)
		}
	}
	return out
}

// dilocoBench runs the configurations on one bed.
type dilocoBench struct {
	t     *testing.T
	b     *netbed.Bed
	data  string // MNIST's files
	out   string
	steps int
	port  int // the next --master-port
}

// dilocoRecord is one run's figures.
type dilocoRecord struct {
	Rate, Model, Config string
	Began               string // UTC, to match against what else ran on the machine
	Flags               []string
	Steps               int
	LaunchSeconds       float64 // from starting the launchers to both exiting: loading, training, evaluation
	TrainSeconds        float64 // the training loop, from rank 0's train lines
	StepMS              float64 // TrainSeconds over Steps
	Target              float64 // the training loss aimed at; 0: none
	TargetStep          int     // the first logged step at or below it; 0: never
	TargetSeconds       float64
	TxBytes             []int64 // each host's veth, during the run
	TxPerStep           float64 // the hosts' mean, per step
	NetTxPerStep        float64 // less the 1-step run's bytes, per step after the first
	DiLoCoBytesPerStep  float64 // rank 0's summary diloco_bytes_sent over Steps
	OuterSteps          int
	SyncSeconds         float64 // rank 0's diloco_sync_seconds
	FinalLoss           float64 // the last train line's loss
	EvalAccuracy        float64
	Curve               []dilocoPoint
}

// dilocoPoint is one train line: the step, the training time up to it, the loss.
type dilocoPoint struct {
	Step    int     `json:"step"`
	Seconds float64 `json:"s"`
	Loss    float64 `json:"loss"`
}

func (m *dilocoBench) setRate(rate string) {
	for i := range m.b.Hosts() {
		if err := m.b.SetRate(m.t.Context(), i, rate); err != nil {
			m.t.Fatal(err)
		}
	}
}

// run trains one configuration for steps steps on the bed.
func (m *dilocoBench) run(rate, model string, c dilocoConfig, steps int, target float64) dilocoRecord {
	t := m.t
	dir := filepath.Join(m.out, rate, model+"-"+c.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	train := append(m.modelFlags(model, steps, dir), c.flags...)
	env := cleanEnv("GODDP_SECRET=" + netbedSecret(t))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m.port++
	var cmds []hostCmd
	for h := range 2 {
		argv := append([]string{self, "--nnodes", "2", "--node-rank", strconv.Itoa(h), "--master-addr", "node0",
			"--master-port", strconv.Itoa(m.port), "--nproc", "2"}, train...)
		cmds = append(cmds, hostCmd{host: h, argv: argv, env: env})
	}
	before := m.txBytes()
	began := time.Now()
	log := runOnHostsWithin(t, m.b, cmds, 8*time.Minute)
	r := dilocoRecord{Rate: rate, Model: model, Config: c.name, Flags: train, Steps: steps, Target: target,
		LaunchSeconds: time.Since(began).Seconds(), Began: began.UTC().Format(time.TimeOnly)}
	for i, a := range m.txBytes() {
		r.TxBytes = append(r.TxBytes, a-before[i])
		r.TxPerStep += float64(a-before[i]) / float64(len(before)) / float64(steps)
	}
	if err := os.WriteFile(filepath.Join(dir, "log.txt"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	r.readLog(t, log, 32*4)
	r.readSummary(t, filepath.Join(dir, "summary.json"))
	return r
}

// modelFlags are the training flags of model.
func (m *dilocoBench) modelFlags(model string, steps int, dir string) []string {
	f := []string{"--data", filepath.Join(m.data, "train-images-idx3-ubyte.gz"),
		"--labels", filepath.Join(m.data, "train-labels-idx1-ubyte.gz"),
		"--eval-data", filepath.Join(m.data, "t10k-images-idx3-ubyte.gz"),
		"--eval-labels", filepath.Join(m.data, "t10k-labels-idx1-ubyte.gz"),
		"--optimizer", "adam", "--lr", "0.001", "--batch-size", "32", "--seed", "1",
		"--steps", strconv.Itoa(steps), "--log-format", "json", "--log-every", "10", "--timeout", "300s",
		"--summary", filepath.Join(dir, "summary.json")}
	if model == "cnn" {
		f = append(f, "--model", "cnn")
	} else {
		f = append(f, "--model", "mlp", "--hidden", "512,512")
	}
	if strings.HasSuffix(dir, "-noop") {
		f = append(f, "--timeline", filepath.Join(dir, "timeline"))
	}
	return f
}

// txBytes is each host's veth's tx_bytes counter.
func (m *dilocoBench) txBytes() []int64 {
	var out []int64
	for _, h := range m.b.Hosts() {
		raw, err := exec.Command("ip", "netns", "exec", h.NS, "cat",
			"/sys/class/net/"+h.Link+"/statistics/tx_bytes").Output()
		if err != nil {
			m.t.Fatalf("tx_bytes of %s in %s: %v", h.Link, h.NS, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			m.t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// readLog reads rank 0's train lines: the loss curve, timed by the
// lines' samples_per_sec (samples of the window over its seconds), and
// when the loss first reached the target.
func (r *dilocoRecord) readLog(t *testing.T, log string, samplesPerStep int) {
	t.Helper()
	last := 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `"msg":"train"`) {
			continue
		}
		var l struct {
			Step          int     `json:"step"`
			Loss          float64 `json:"loss"`
			SamplesPerSec float64 `json:"samples_per_sec"`
		}
		if err := json.Unmarshal([]byte(line[strings.Index(line, "{"):]), &l); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if l.SamplesPerSec > 0 {
			r.TrainSeconds += float64((l.Step-last)*samplesPerStep) / l.SamplesPerSec
		}
		last = l.Step
		r.Curve = append(r.Curve, dilocoPoint{l.Step, r.TrainSeconds, l.Loss})
		r.FinalLoss = l.Loss
		if r.Target > 0 && r.TargetStep == 0 && l.Loss <= r.Target {
			r.TargetStep, r.TargetSeconds = l.Step, r.TrainSeconds
		}
	}
	if last != r.Steps {
		t.Fatalf("%s %s %s: the train lines end at step %d, want %d", r.Rate, r.Model, r.Config, last, r.Steps)
	}
	r.StepMS = 1e3 * r.TrainSeconds / float64(r.Steps)
}

func (r *dilocoRecord) readSummary(t *testing.T, file string) {
	t.Helper()
	s := readSummary(t, file)
	if s.EvalAccuracy == nil {
		t.Fatalf("%s: no held-out evaluation", file)
	}
	r.EvalAccuracy = *s.EvalAccuracy
	r.DiLoCoBytesPerStep = float64(s.DiLoCoBytesSent) / float64(r.Steps)
	r.OuterSteps, r.SyncSeconds = s.DiLoCoOuterSteps, s.DiLoCoSyncSeconds
}

// netOf takes the fixed run's bytes (start-up, one step, the
// evaluation, the exit) out of r's.
func (r *dilocoRecord) netOf(fixed dilocoRecord) {
	var all, base float64
	for i := range r.TxBytes {
		all += float64(r.TxBytes[i])
		base += float64(fixed.TxBytes[i])
	}
	n := float64(len(r.TxBytes))
	r.NetTxPerStep = (all - base) / n / float64(r.Steps-1)
}

func (r dilocoRecord) row() string {
	target := "–"
	if r.TargetStep > 0 {
		target = fmt.Sprintf("%d (%.1f s)", r.TargetStep, r.TargetSeconds)
	}
	return fmt.Sprintf("| %s | %s | %s | %.1f | %.1f | %.1f | %s | %.0f | %.0f | %.0f | %.4f | %.2f%% |", r.Rate,
		r.Model, r.Config, r.LaunchSeconds, r.TrainSeconds, r.StepMS, target, r.TxPerStep, r.NetTxPerStep,
		r.DiLoCoBytesPerStep, r.FinalLoss, 100*r.EvalAccuracy)
}

// dilocoTable is the runs as docs/diloco.md's table.
func dilocoTable(runs []dilocoRecord) string {
	var b strings.Builder
	b.WriteString("| link | model | configuration | launch s | train s | step ms | loss ≤ target: step (s) | " +
		"host tx B/step | net B/step | diloco B/step | final loss | t10k |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		b.WriteString(r.row() + "\n")
	}
	return b.String()
}

// parseTargets reads model=loss pairs.
func parseTargets(t *testing.T, s string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || !(f > 0) {
			t.Fatalf("GODDP_DILOCO_TARGETS %q: want model=loss pairs, comma-separated", s)
		}
		out[k] = f
	}
	return out
}
