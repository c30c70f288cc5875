package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The DiLoCo flags are refused where they do nothing or cannot run yet,
// each naming the reason.
func TestDiLoCoFlagsRefused(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--outer-lr", "1"}, "--outer-lr does nothing without --diloco-sync-every"},
		{[]string{"--diloco-fragments", "2"}, "--diloco-fragments does nothing without"},
		{[]string{"--diloco-sync-every", "5", "--diloco-quantize", "int4"}, "want none, fp16, bf16 or int8"},
		{[]string{"--diloco-sync-every", "-1"}, "want 0 (off) or H >= 1"},
		{[]string{"--diloco-sync-every", "5", "--zero"}, "nothing to shard"},
		{[]string{"--diloco-sync-every", "5", "--comm-hook", "fp16"}, "communicate no gradients"},
		{[]string{"--diloco-sync-every", "5", "--on-nonfinite", "skip"}, "would not agree"},
		{[]string{"--diloco-sync-every", "4", "--diloco-fragments", "2", "--diloco-delay", "2"}, "Delay 2"},
		{[]string{"--diloco-sync-every", "4", "--diloco-alpha", "2"}, "Alpha 2"},
		{[]string{"--diloco-sync-every", "4", "--outer-momentum", "-1"}, "numbers >= 0"},
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
	if _, err := parseFlags([]string{"--backend", "local", "--diloco-sync-every", "8", "--diloco-fragments", "2",
		"--diloco-delay", "1", "--diloco-alpha", "0.5", "--diloco-quantize", "bf16"}, io.Discard); err != nil {
		t.Fatalf("a Streaming DiLoCo command line: %v", err)
	}
}

// Streaming DiLoCo under ddp-train: 2 processes over tcp, 2 fragments, a
// delay of 1, mixing and bf16 pseudo-gradients. Fragment 0 (offset 4) is
// sent at inner steps 4, 12, 20 and applied a step later; fragment 1
// (offset 8) is sent at 8, 16, 24 and applied at 9 and 17, and its third
// send at the end of the run (diloco.Flush): 6 outer steps, and every send
// is its fragment's values in bf16, 3·171·2 bytes in all. Both ranks end with
// the same (global) parameters, and the replica check passes at every step.
func TestDiLoCoStreamingRuns(t *testing.T) {
	for _, c := range []struct{ backend, q string }{{"tcp", "bf16"}, {"tcp", "int8"}, {"local", "int8"}} {
		t.Run(c.backend+"/"+c.q, func(t *testing.T) { streamingRun(t, c.backend, c.q) })
	}
}

// streamingRun is TestDiLoCoStreamingRuns on a backend with
// --diloco-quantize q (the bytes are checked for bf16, whose
// pseudo-gradients go to one allreduce).
func streamingRun(t *testing.T, backend, q string) {
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	sum := dir + "/s.json"
	r := ddpTrain(t, "--backend", backend, "--nproc", "2", "--data", dir+"/X.npy", "--labels", dir+"/y.npy",
		"--model", "mlp", "--hidden", "10,7", "--dtype", "float64", "--optimizer", "adamw", "--lr", "0.02",
		"--steps", "24", "--diloco-sync-every", "8", "--diloco-fragments", "2", "--diloco-delay", "1",
		"--diloco-alpha", "0.5", "--diloco-quantize", q, "--check-replicas-every", "1", "--summary", sum,
		"--timeline", dir+"/tl", "--log-format", "json", "--timeout", "30s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	s := readSummary(t, sum)
	if s.CommHook != "noop" {
		t.Errorf("summary: comm_hook %q, want noop (the reducer's under DiLoCo)", s.CommHook)
	}
	if s.DiLoCoOuterSteps != 6 || (q == "bf16" && s.DiLoCoBytesSent != 3*171*2) {
		t.Errorf("summary: %d outer steps and %d bytes sent, want 6 and %d", s.DiLoCoOuterSteps, s.DiLoCoBytesSent,
			3*171*2)
	}
	d := digests(r.stderr)
	if len(d) != 2 || d["0"] == "" || d["0"] != d["1"] {
		t.Errorf("the ranks' final digests: %v, want two equal ones", d)
	}
	trace, err := os.ReadFile(dir + "/tl/rank-0.json")
	if err != nil {
		t.Fatal(err)
	}
	// sends at 4, 8, 12, 16, 20, 24, arrivals at 5, 9, 13, 17, 21 and the flush
	if n := strings.Count(string(trace), `"name":"diloco"`); n != 12 {
		t.Errorf("the timeline holds %d diloco slices, want 12", n)
	}
}

// ddp_diloco_* count what DiLoCo's steps did.
func TestDiLoCoMetrics(t *testing.T) {
	gs, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gs[0].Close()
	params := []pg.Tensor{pg.Float64s(make([]float64, 3))}
	dl, err := diloco.New(gs[0], params, diloco.Options{SyncEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{dl: &dilocoRun{dl: dl}}
	m := newTrainingMetrics()
	for range 4 {
		if err := s.dilocoStep(context.Background(), params, &m); err != nil {
			t.Fatal(err)
		}
	}
	if o, b := testutil.ToFloat64(m.dilocoOuter), testutil.ToFloat64(m.dilocoBytes); o != 2 || b != 2*3*8 {
		t.Errorf("ddp_diloco_outer_steps_total %v, ddp_diloco_sent_bytes_total %v; want 2 and 48", o, b)
	}
	if err := s.dilocoStep(context.Background(), params, nil); err != nil { // metrics off
		t.Fatal(err)
	}
}

// A Streaming DiLoCo run checkpointed every 4 steps (fragment 0 is sent
// at step 4 and applied at 5: the checkpoint holds it in flight) and
// resumed at step 12 ends bitwise where the uninterrupted run ends; the
// checkpoint's model is the global parameters, which `ddp-train eval`
// reads as any checkpoint; a resume on another world size is refused.
func TestDiLoCoCheckpointResumes(t *testing.T) {
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	common := []string{"--backend", "tcp", "--nproc", "3", "--data", dir + "/X.npy", "--labels", dir + "/y.npy",
		"--model", "mlp", "--hidden", "10,7", "--dtype", "float64", "--optimizer", "adamw", "--lr", "0.02",
		"--diloco-sync-every", "8", "--diloco-fragments", "2", "--diloco-delay", "1", "--diloco-alpha", "0.5",
		"--log-format", "json", "--timeout", "30s"}
	run := func(args ...string) result {
		t.Helper()
		r := ddpTrain(t, append(append([]string(nil), common...), args...)...)
		if r.code != 0 {
			t.Fatalf("ddp-train %v: exit %d\n%s", args, r.code, r.stderr)
		}
		return r
	}
	run("--steps", "24", "--save", dir+"/whole")
	ck := dir + "/ck"
	run("--steps", "12", "--checkpoint", ck, "--checkpoint-every", "4")
	run("--steps", "24", "--checkpoint", ck, "--checkpoint-every", "4", "--resume", "--save", dir+"/resumed")
	sameArrays(t, "DiLoCo resumed at step 12", savedArrays(t, dir+"/resumed"), savedArrays(t, dir+"/whole"))
	r := ddpTrain(t, append(append([]string(nil), common[:2]...), append([]string{"--nproc", "2"},
		append(common[4:], "--steps", "24", "--checkpoint", ck, "--resume", "--resume-allow-changes",
			"world_size")...)...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "resume it on 3 ranks") {
		t.Errorf("a 3-rank DiLoCo checkpoint resumed on 2 ranks: exit %d\n%s", r.code, tail(r.stderr))
	}
}

// Under DiLoCo each rank's gradients are its own: a sample that overflows
// on rank 0 at step 2 (overflowData) stops every rank at step 2 with exit
// 3 (the origin check agrees on it with an allreduce), and no rank waits
// for the others' timeout; --find-nonfinite-origin=false is refused.
func TestDiLoCoNonFinite(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	r := ddpTrain(t, append(args("--epochs", "1", "--steps", "0", "--optimizer", "adam", "--diloco-sync-every", "4",
		"--timeout", "60s"), overflowData(t, dir)...)...)
	if r.code != exitDiverged || !strings.Contains(r.stderr, "training diverged at step 2") {
		t.Fatalf("exit %d, last line %q; want exit 3 at step 2\n%s", r.code, lastLine(r.stderr), r.stderr)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("it took %v: a rank waited for a timeout", took)
	}
	_, err := parseFlags([]string{"--diloco-sync-every", "4", "--find-nonfinite-origin=false"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "stops every rank at the same step") {
		t.Errorf("--find-nonfinite-origin=false with DiLoCo: %v", err)
	}
}
