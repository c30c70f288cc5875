package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// asMain makes the test binary behave as ddp-train, so the launcher can
// start it as its workers (os.Executable is the test binary).
const asMain = "GODDP_DDP_TRAIN_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
	}
	os.Setenv(asMain, "1") // for the processes the tests start
	goleak.VerifyTestMain(m)
}

// result is one ddp-train run as a separate process.
type result struct {
	code           int
	stdout, stderr string
}

// ddpTrain runs ddp-train in a child process (the launcher) with args.
func ddpTrain(t *testing.T, args ...string) result {
	t.Helper()
	return ddpTrainIn(t, "", args...)
}

// ddpTrainIn is ddpTrain run in the working directory dir ("": this
// process's).
func ddpTrainIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0") // -race waits a second at every process exit otherwise
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

// small are flags for a fast run.
var small = []string{"--hidden", "16", "--samples", "512", "--batch-size", "16", "--log-format", "json", "--timeout",
	"30s"}

func args(extra ...string) []string { return append(append([]string(nil), small...), extra...) }

var digestRE = regexp.MustCompile(`"rank":(\d+).*"param_digest":"([0-9a-f]+)"`)

// digests maps each rank to the digest of its final parameters.
func digests(stderr string) map[string]string {
	out := map[string]string{}
	for _, m := range digestRE.FindAllStringSubmatch(stderr, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestWorkersEndBitwiseEqual(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run("nproc="+strconv.Itoa(n), func(t *testing.T) {
			r := ddpTrain(t, args("--nproc", strconv.Itoa(n), "--steps", "15", "--optimizer", "adam", "--lr", "0.01")...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			d := digests(r.stderr)
			if len(d) != n {
				t.Fatalf("digests %v from\n%s", d, r.stderr)
			}
			for rank, v := range d {
				if v != d["0"] {
					t.Fatalf("rank %s ended with parameters %s, rank 0 with %s", rank, v, d["0"])
				}
			}
		})
	}
}

func TestInitSaveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if r := ddpTrain(t, args("--steps", "5", "--save", a)...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if r := ddpTrain(t, args("--steps", "0", "--init", a, "--save", b, "--seed", "99")...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, name := range []string{"fc1.weight.npy", "fc1.bias.npy", "fc2.weight.npy", "fc2.bias.npy"} {
		x, err1 := os.ReadFile(filepath.Join(a, name))
		y, err2 := os.ReadFile(filepath.Join(b, name))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs after --init/--save (%v, %v)", name, err1, err2)
		}
	}
}

func TestResumeEqualsUninterrupted(t *testing.T) {
	dir := t.TempDir()
	ck, whole, resumed := filepath.Join(dir, "ck"), filepath.Join(dir, "whole"), filepath.Join(dir, "resumed")
	common := args("--optimizer", "adam", "--lr", "0.01", "--grad-accum", "2")
	if r := ddpTrain(t, append(common, "--steps", "12", "--save", whole)...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if r := ddpTrain(t, append(common, "--steps", "7", "--checkpoint", ck, "--checkpoint-every", "7")...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if r := ddpTrain(t,
		append(common, "--steps", "12", "--checkpoint", ck, "--resume", "--save", resumed)...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, name := range []string{"fc1.weight.npy", "fc2.bias.npy"} {
		x, _ := os.ReadFile(filepath.Join(whole, name))
		y, _ := os.ReadFile(filepath.Join(resumed, name))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Fatalf("%s: the resumed run differs from the uninterrupted one", name)
		}
	}
}

func TestLocalBackend(t *testing.T) {
	summary := filepath.Join(t.TempDir(), "s.json")
	r := ddpTrain(t, args("--backend", "local", "--nproc", "3", "--steps", "10", "--summary", summary)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(summary)
	if err != nil || !strings.Contains(string(b), `"backend": "local"`) ||
		!strings.Contains(string(b), `"world_size": 3`) {
		t.Fatalf("summary %s (%v)", b, err)
	}
}

// Bad input: one clear line, exit 2, and no --save output.
func TestBadInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "out")
	missing := filepath.Join(dir, "nope.npy")
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown flag":      {[]string{"--frobnicate"}, "frobnicate"},
		"missing file":      {[]string{"--data", missing, "--labels", missing}, "nope.npy"},
		"half data":         {[]string{"--data", missing}, "--data and --labels"},
		"bad init":          {[]string{"--init", dir}, ".npy"},
		"bad optimizer":     {[]string{"--optimizer", "lion"}, "lion"},
		"bad comm hook":     {[]string{"--comm-hook", "zip"}, "zip"},
		"bad dtype":         {[]string{"--dtype", "int8"}, "int8"},
		"bad replica check": {[]string{"--check-replicas-every", "-1"}, "--check-replicas-every -1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := ddpTrain(t, args(append(c.args, "--steps", "3", "--save", save)...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			if _, err := os.Stat(save); err == nil {
				t.Fatal("a failed run wrote --save output")
			}
		})
	}
}

// A killed worker makes ddp-train exit non-zero within the timeout,
// naming the rank.
func TestKilledWorkerIsNamed(t *testing.T) {
	self, _ := os.Executable()
	cmd := exec.Command(self, args("--steps", "1000000", "--timeout", "10s", "--log-every", "1000")...)
	cmd.Env = os.Environ()
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := waitForWorker(t, cmd.Process.Pid, "1")
	time.Sleep(500 * time.Millisecond) // let training start
	if err := killProcess(victim); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("ddp-train exited 0 after a worker was killed")
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ddp-train still running 30s after a worker was killed:\n%s", errOut.String())
	}
	// Note [the headline names the culprit]
	if !strings.Contains(errOut.String(), "ddp-train: rank 1 died (killed by SIGKILL)") {
		t.Fatalf("the failed rank is not named:\n%s", errOut.String())
	}
}
