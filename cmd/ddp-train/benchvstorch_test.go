package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchRow is a row of scripts/bench-vs-torch.py's tables: the label,
// then a cell per side (the goddp binaries, then torch), then the ratios.
var benchRow = regexp.MustCompile(`(?m)^\| ([^|]+?) \|(.*)\|$`)

// scripts/bench-vs-torch.py --quick, with this test binary as ddp-train:
// every model's table parses, and both sides trained from the same start
// on the same samples: test accuracy above chance (10%) on each side, and
// equal to within a few test samples between them.
func TestBenchVsTorchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python and ddp-train processes")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no torch (apt-get install python3-torch; scripts/test.sh does)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command to find the GoMNIST module's files with")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "../../scripts/bench-vs-torch.py", "--quick",
		"--ddp-train", self)
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench-vs-torch.py --quick: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	tables := strings.Split(out.String(), "\n### ")[1:]
	if len(tables) != 3 {
		t.Fatalf("%d tables, want 3 (cnn, mlp, mlp-1024x1024):\n%s", len(tables), out.String())
	}
	for _, tab := range tables {
		model, _, _ := strings.Cut(tab, ":")
		rows := map[string][]string{}
		for _, m := range benchRow.FindAllStringSubmatch(tab, -1) {
			rows[m[1]] = strings.Split(m[2], " | ")
		}
		for _, label := range []string{"training wall time (s)", "process wall time (s)", "samples/s, 2 ranks",
			"samples/s, 1 rank", "scaling efficiency, 2 over 1"} {
			if len(rows[label]) < 2 || strings.TrimSpace(rows[label][0]) == "" {
				t.Errorf("%s: no row %q:\n%s", model, label, tab)
			}
		}
		acc := rows["test accuracy (t10k)"]
		if len(acc) < 2 {
			t.Fatalf("%s: no test accuracy row:\n%s", model, tab)
		}
		var got [2]float64
		for i, cell := range acc[:2] { // goddp, torch
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(cell), "%"), 64)
			if err != nil {
				t.Fatalf("%s: accuracy cell %q: %v", model, cell, err)
			}
			if v <= 10 {
				t.Errorf("%s: side %d scored %.2f%%, no better than chance:\n%s", model, i, v, tab)
			}
			got[i] = v
		}
		if d := got[0] - got[1]; d > 1 || d < -1 { // 1000 test samples: 10 of them
			t.Errorf("%s: goddp %.2f%% and torch %.2f%% from the same start and order:\n%s", model, got[0], got[1], tab)
		}
	}
}
