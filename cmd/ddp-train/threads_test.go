package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

var gomaxprocsRE = regexp.MustCompile(`gomaxprocs=(\S*)`)

// launchedThreads runs a program that prints the GOMAXPROCS it was given
// under ddp-train --nproc n, with extra in the launcher's environment, and
// returns what each worker printed and the launcher's output.
func launchedThreads(t *testing.T, n int, extra ...string) ([]string, string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("skipping: no sh to run as the workers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, self, "--nproc", strconv.Itoa(n), sh, "-c",
		`echo "gomaxprocs=${GOMAXPROCS-unset}"`)
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("ddp-train --nproc %d sh: %v\n%s", n, err, out.String())
	}
	var got []string
	for _, m := range gomaxprocsRE.FindAllStringSubmatch(out.String(), -1) {
		got = append(got, m[1])
	}
	if len(got) != n {
		t.Fatalf("%d workers reported, want %d:\n%s", len(got), n, out.String())
	}
	return got, out.String()
}

// The launcher gives each of n > 1 local workers GOMAXPROCS = cores / n
// (at least 1) when the user did not set it, and says so once; a
// GOMAXPROCS the user set reaches the workers as it was, and one worker
// gets nothing (torchrun's rule for OMP_NUM_THREADS).
func TestLauncherThreadPolicy(t *testing.T) {
	want := strconv.Itoa(max(runtime.GOMAXPROCS(0)/2, 1))
	got, out := launchedThreads(t, 2)
	for _, g := range got {
		if g != want {
			t.Errorf("a worker of 2 got GOMAXPROCS=%s, want %s:\n%s", g, want, out)
		}
	}
	if n := bytes.Count([]byte(out), []byte("setting GOMAXPROCS for each worker")); n != 1 {
		t.Errorf("the policy logged %d times, want once:\n%s", n, out)
	}
	got, out = launchedThreads(t, 2, "GOMAXPROCS=3")
	for _, g := range got {
		if g != "3" {
			t.Errorf("with GOMAXPROCS=3 set, a worker got GOMAXPROCS=%s:\n%s", g, out)
		}
	}
	if bytes.Contains([]byte(out), []byte("setting GOMAXPROCS")) {
		t.Errorf("the policy logged though the user set GOMAXPROCS:\n%s", out)
	}
	if got, out = launchedThreads(t, 1); got[0] != "unset" {
		t.Errorf("a single worker got GOMAXPROCS=%s, want it left unset:\n%s", got[0], out)
	}
}
