package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
)

// runRanks starts one ddp-train per element of perRank as the ranks of
// a job an external launcher started (torchrun's variables), each with
// args plus its own flags, and returns their results; the job is killed
// after limit.
func runRanks(t *testing.T, limit time.Duration, perRank ...[]string) []result {
	t.Helper()
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return runRanksAt(t, limit, port, perRank...)
}

// runRanksAt is runRanks with the store on MASTER_PORT port.
func runRanksAt(t *testing.T, limit time.Duration, port int, perRank ...[]string) []result {
	t.Helper()
	secret, _ := launch.NewSecret()
	self, _ := os.Executable()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	results := make([]result, len(perRank))
	var wg sync.WaitGroup
	for r, extra := range perRank {
		cmd := exec.CommandContext(ctx, self, args(extra...)...)
		cmd.Env = cleanEnv("MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GODDP_SECRET="+secret,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(len(perRank)))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		wg.Go(func() {
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			results[r] = result{code, out.String(), errOut.String()}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the ranks still ran after %v: %+v", limit, results)
	}
	return results
}

// Note [every rank runs the same job]: ranks an external launcher started
// with different settings all exit 2 at start-up, each naming the
// setting, the values and the ranks, before any step (none says "done",
// and a differing --lr is not left to the replica check of step 10).
func TestRanksMustRunTheSameJob(t *testing.T) {
	cases := []struct {
		name    string
		perRank [][]string
		want    string
	}{
		{"steps", [][]string{{"--steps", "5"}, {"--steps", "8"}}, "--steps is 5 on rank 0 but 8 on rank 1"},
		{"steps, other way", [][]string{{"--steps", "8"}, {"--steps", "5"}}, "--steps is 8 on rank 0 but 5 on rank 1"},
		{"lr", [][]string{{"--steps", "12", "--lr", "0.1"}, {"--steps", "12", "--lr", "0.2"}},
			"--lr is 0.1 on rank 0 but 0.2 on rank 1"},
		{"epochs against steps", [][]string{{"--epochs", "1"}, {"--steps", "16"}},
			"--epochs is 1 on rank 0 but 0 on rank 1; --steps is 0 on rank 0 but 16 on rank 1"},
		{"optimizer and hook", [][]string{{"--optimizer", "adam"}, {"--comm-hook", "fp16"}, {}},
			"--comm-hook is allreduce on ranks 0, 2 but fp16 on rank 1; --optimizer is adam on rank 0 but sgd on ranks 1, 2"},
		{"the data", [][]string{{"--samples", "512"}, {"--samples", "640"}}, "the training set is \"512 samples of shape " +
			"[32], 4 classes\" on rank 0 but \"640 samples of shape [32], 4 classes\" on rank 1"},
		{"checkpoint on one rank only", [][]string{{"--checkpoint", t.TempDir()}, {}},
			"--checkpoint (given) is true on rank 0 but false on rank 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			results := runRanks(t, 60*time.Second, c.perRank...)
			for r, res := range results {
				last := lastLine(res.stderr)
				if res.code != 2 || !strings.Contains(last, "the ranks were started with different settings: ") ||
					!strings.Contains(last, c.want) {
					t.Errorf("rank %d: exit %d, last line %q; want exit 2 naming %q", r, res.code, last, c.want)
				}
				if strings.Contains(res.stderr, `"msg":"done"`) || strings.Contains(res.stderr, `"msg":"train"`) {
					t.Errorf("rank %d trained:\n%s", r, res.stderr)
				}
			}
			t.Logf("every rank exited after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// The same settings, spelled differently where only the machine differs
// (paths, logging, --timeout), agree.
func TestRanksAgreeDespiteLocalFlags(t *testing.T) {
	results := runRanks(t, 60*time.Second,
		[]string{"--steps", "3", "--log-level", "info", "--timeout", "30s", "--summary", t.TempDir() + "/s.json"},
		[]string{"--steps", "3", "--log-level", "warn", "--timeout", "40s"})
	for r, res := range results {
		if res.code != 0 {
			t.Fatalf("rank %d: exit %d\n%s", r, res.code, res.stderr)
		}
	}
}

// settingsMismatch groups the ranks by value.
func TestSettingsMismatch(t *testing.T) {
	ranks := make([][]string, 12)
	for r := range ranks {
		ranks[r] = []string{`--lr="0.1"`, `--steps="5"`}
	}
	ranks[3][1] = `--steps="6"`
	ranks[11] = []string{`--lr="0.1"`}
	err := settingsMismatch(ranks)
	want := `--steps is 5 on ranks 0, 1, 2, 4, 5, 6, 7, 8, and 2 more but 6 on rank 3 but (not set: another version of ` +
		`ddp-train?) on rank 11`
	if !isUsage(err) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "--lr") {
		t.Fatalf("%v\nwant %q", err, want)
	}
}
