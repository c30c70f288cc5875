package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goddp/ddp/internal/netbed"
)

// TestMain lets the test binary be calibrate's probe worker too (it runs
// os.Executable on each host).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == probeWorkerCmd {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func netbedOrSkip(t *testing.T) {
	t.Helper()
	netbed.SkipUnless(t, os.Getenv("GODDP_TEST_NETBED") == "1")
}

// On two namespaces joined by a 100 Mbit/s link, fp16 and PowerSGD beat
// plain allreduce, measured and predicted, and the model's allreduce
// step is within a factor of 1.5 of the measured one. (The validation
// table of docs/scaling.md is 'scale validate' with more of everything.)
func TestNetbedValidateSmall(t *testing.T) {
	netbedOrSkip(t)
	bin := filepath.Join(t.TempDir(), "ddp-train")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/goddp/ddp/cmd/ddp-train")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ddp-train: %v\n%s", err, out)
	}
	var out, errOut bytes.Buffer
	err := run([]string{"validate", "--ddp-train", bin, "--out", t.TempDir(), "--repeats", "1", "--rates", "100mbit",
		"--ranks-per-host", "1", "--hooks", "allreduce,fp16,powersgd", "--steps", "16", "--skip", "5",
		"--calibrate-budget", "300ms"}, &out, &errOut)
	t.Log(out.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	row := func(hook string) (measured, predicted float64) {
		t.Helper()
		m := regexp.MustCompile(`\| 100mbit \| 2×1 \| ` + hook + ` \| ([0-9.]+) \([^)]*\) \| ([0-9.]+) ` +
			`\|`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no %s row", hook)
		}
		a, _ := strconv.ParseFloat(m[1], 64)
		b, _ := strconv.ParseFloat(m[2], 64)
		return a, b
	}
	ar, arPred := row("allreduce")
	for _, h := range []string{"fp16", "powersgd"} {
		m, p := row(h)
		if m >= ar || p >= arPred {
			t.Errorf("%s: measured %.1f ms, predicted %.1f ms; allreduce %.1f ms, predicted %.1f ms: want %s faster in both", h,
				m, p, ar, arPred, h)
		}
	}
	if r := arPred / ar; r < 1/1.5 || r > 1.5 {
		t.Errorf("allreduce: predicted %.1f ms, measured %.1f ms: off by more than 1.5×", arPred, ar)
	}
}
