package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/bench/scale/scalemodel"
	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/timeline"
)

// writeTrace writes, as the reducer does, steps of period 100 ms:
// forward 10 ms, backward 60 ms, bucket 0 (params 2, 3) launched 20 ms
// into backward, bucket 1 (params 0, 1) at its end, and Finalize
// waiting 2 ms for bucket 1.
func writeTrace(t *testing.T, dir string, steps int) {
	t.Helper()
	w, err := timeline.Create(filepath.Join(dir, "rank-0.json"), 0)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0)
	ms := func(base time.Time, d float64) time.Time {
		return base.Add(time.Duration(d * float64(time.Millisecond)))
	}
	for i := range steps {
		s := ms(at, float64(100*i))
		e := timeline.Event{Name: "step", Lane: timeline.LaneStep, Start: s, End: ms(s, 75)}
		e.Args[0] = timeline.Arg{Key: "iteration", Value: int64(i)}
		w.Write(&e)
		w.Write(&timeline.Event{Name: "forward", Lane: timeline.LaneCompute, Start: s, End: ms(s, 10)})
		w.Write(&timeline.Event{Name: "backward", Lane: timeline.LaneCompute, Start: ms(s, 10), End: ms(s, 70)})
		for p, b := range []int64{1, 1, 0, 0} {
			c := timeline.Event{Name: "copy", Lane: timeline.LaneReducer, Start: ms(s, 12), End: ms(s, 13)}
			c.Args[0], c.Args[1] = timeline.Arg{Key: "param", Value: int64(p)}, timeline.Arg{Key: "bucket", Value: b}
			w.Write(&c)
		}
		for b, r := range []float64{30, 70} {
			l := timeline.Event{Name: "launch", Lane: timeline.LaneReducer, Start: ms(s, r), End: ms(s, r+0.1)}
			l.Args[0], l.Args[1] = timeline.Arg{Key: "bucket", Value: int64(b)}, timeline.Arg{Key: "bytes",
				Value: int64(1000 * (b + 1))}
			w.Write(&l)
		}
		wt := timeline.Event{Name: "wait", Lane: timeline.LaneReducer, Start: ms(s, 70), End: ms(s, 72)}
		wt.Args[0] = timeline.Arg{Key: "bucket", Value: 1}
		w.Write(&wt)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestProfileFromTimeline(t *testing.T) {
	dir := t.TempDir()
	writeTrace(t, dir, 12)
	var out, errOut bytes.Buffer
	if err := run([]string{"profile", "--timeline", dir, "--mlp", "8,16,4"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var p scalemodel.Profile
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	approx := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	approx("forward", p.Forward, 0.010)
	approx("backward", p.Backward, 0.060)
	approx("other", p.Other, 0.030)
	if len(p.Buckets) != 2 {
		t.Fatalf("%d buckets, want 2: %+v", len(p.Buckets), p)
	}
	approx("bucket 0 ready", p.Buckets[0].Ready, 0.020)
	approx("bucket 1 ready", p.Buckets[1].Ready, 0.060)
	approx("bucket 1 bytes", p.Buckets[1].Bytes, 2000)
	// Bucket 0 holds params 2 and 3: fc2.weight [16,4] and fc2.bias [4].
	if got := p.Buckets[0].Params; len(got) != 2 || got[0] != (scalemodel.Param{Rows: 16, Cols: 4}) ||
		got[1] != (scalemodel.Param{Rows: 4}) {
		t.Errorf("bucket 0 params %+v", got)
	}
}

func TestPredictTable(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.json")
	b, _ := json.Marshal(scalemodel.Profile{Forward: 0.01, Backward: 0.06, Other: 0.03,
		Buckets: []scalemodel.Bucket{{Ready: 0.06, Bytes: 12.5e6}}})
	if err := os.WriteFile(prof, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run([]string{"predict", "--profile", prof, "--ranks", "1,2", "--ranks-per-host", "1", "--inter", "1gbit",
		"--inter-latency", "0s", "--algorithms", "ring", "--hooks", "allreduce,fp16"}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	// 2 ranks, ring: 12.5 MB at 125 MB/s is 100 ms, all after backward.
	for _, want := range []string{"1      1       ring  allreduce   100.00", "2      2       ring  allreduce   200.00",
		"2      2       ring       fp16   150.00"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("no row %q in\n%s", want, out.String())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"predict"},
		{"predict", "--profile", "x.json", "--timeline", "d"},
		{"predict", "--profile", "/nonexistent.json"},
		{"validate"},
	} {
		var out, errOut bytes.Buffer
		if err := run(args, &out, &errOut); err == nil {
			t.Errorf("scale %v: no error", args)
		}
	}
}

// -h prints the usage and exits 0 (cli.Code, which main exits with), for
// scale itself, before any subcommand, as for each subcommand.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"predict", "-h"}, {"validate", "--help"}} {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		if cli.Code(err) != 0 || !strings.Contains(errOut.String(), "Usage: ") {
			t.Errorf("scale %v: exit %d (%v), usage %q; want exit 0 and the usage", args, cli.Code(err), err, errOut.String())
		}
	}
}

func TestCalibrationFit(t *testing.T) {
	const alpha, beta = 100e-6, 12.5e6
	c := calibration{Rows: []probeRow{{8, alpha + 8/beta}}}
	for _, s := range []int{1 << 19, 1 << 21, 1 << 23} {
		c.Rows = append(c.Rows, probeRow{s, 2*alpha + float64(s)/beta})
	}
	if err := c.fit(); err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.Bandwidth/beta-1) > 1e-9 || math.Abs(c.Latency/alpha-1) > 1e-9 {
		t.Errorf("fit α %v β %v, want %v %v", c.Latency, c.Bandwidth, alpha, beta)
	}
}

// analyze reads a record and its traces: with every run's trace the same
// (a 100 ms step, 70 ms of it compute), the noop profile predicts the
// uncapped allreduce, and the overhead column adds back what the model
// missed there.
func TestAnalyzeRecord(t *testing.T) {
	dir := t.TempDir()
	rec := record{Hidden: "16", Hosts: 2, Skip: 2, Calibration: calibrations{
		Intra: scalemodel.Link{Latency: 1e-5, Bandwidth: 1e9},
		Inter: map[string]scalemodel.Link{
			"none": {Latency: 1e-5, Bandwidth: 1e9}, "100mbit": {Latency: 1e-4, Bandwidth: 12.5e6}}}}
	for _, r := range []runRecord{{0, "none", 1, "noop", "a"}, {0, "none", 1, "allreduce", "b"},
		{0, "100mbit", 1, "allreduce", "c"}} {
		if err := os.MkdirAll(filepath.Join(dir, r.Dir), 0o755); err != nil {
			t.Fatal(err)
		}
		writeTrace(t, filepath.Join(dir, r.Dir), 10)
		rec.Runs = append(rec.Runs, r)
	}
	if err := writeJSON(filepath.Join(dir, "record.json"), rec); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"validate", "--analyze", dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	// Uncapped: bucket 1 (2000 bytes, ready at backward's end; recursive
	// doubling, one round) costs α + 2 µs = 12 µs after backward. At
	// 100 Mbit/s, 100 µs + 160 µs: 100.26 ms, and 100.25 ms once the
	// uncapped run's overhead (−12 µs) is added.
	for _, want := range []string{
		"| none | 2×1 | allreduce | 100.0 (100.0–100.0) | 100.0 | +0% | – | – |",
		"| 100mbit | 2×1 | allreduce | 100.0 (100.0–100.0) | 100.3 | +0% | 100.2 | +0% | 2.0 | 0.3 |",
		"compute-only (noop), 2×1 ranks, median of 1 runs: forward 10.0 ms, backward 60.0 ms, other 30.0 ms",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}

// predict --diloco-sync-every: a 12.5 MB model on 2 hosts at 1 Gbit/s,
// 100 ms of compute: DDP's step is 200 ms; DiLoCo at H 10 adds a tenth of
// the 100 ms allreduce, and a delay of one step hides it all.
func TestPredictDiLoCoTable(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.json")
	b, _ := json.Marshal(scalemodel.Profile{Forward: 0.01, Backward: 0.06, Other: 0.03,
		Buckets: []scalemodel.Bucket{{Ready: 0.06, Bytes: 12.5e6}}})
	if err := os.WriteFile(prof, b, 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"predict", "--profile", prof, "--ranks", "2", "--ranks-per-host", "1", "--inter", "1gbit",
		"--inter-latency", "0s", "--algorithms", "ring", "--diloco-sync-every", "10,100"}
	for _, tc := range []struct {
		extra []string
		want  []string
	}{
		{nil, []string{"2 2 ring 10 1 0 none 110.00 100.00 10.00 0 1250000 1250000 200.00 12500000 1.82",
			"2 2 ring 100 1 0 none 101.00 100.00 1.00 0 125000 125000 200.00 12500000 1.98"}},
		{[]string{"--diloco-delay", "1", "--diloco-fragments", "2", "--diloco-quantize", "bf16"},
			[]string{"2 2 ring 10 2 1 bf16 100.00 25.00 0.00 100 625000 625000 200.00 12500000 2.00"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(append(base, tc.extra...), &out, &errOut); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		got := strings.Join(strings.Fields(out.String()), " ")
		for _, want := range tc.want {
			if !strings.Contains(got, want) {
				t.Errorf("no row %q in\n%s", want, out.String())
			}
		}
	}
	for _, bad := range [][]string{{"--diloco-quantize", "int8"}, {"--diloco-delay", "10"}} {
		var out, errOut bytes.Buffer
		if err := run(append(base, bad...), &out, &errOut); err == nil {
			t.Errorf("scale predict %v: no error", bad)
		}
	}
}
