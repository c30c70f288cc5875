package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// While a two-worker job trains, each rank's /debug/state says its step
// and its reducer's progress, and /debug/pprof serves its goroutines.
func TestDebugEndpoint(t *testing.T) {
	port, errOut := startMetricsJob(t)
	client := http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, string) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for rank := range 2 {
		base := fmt.Sprintf("http://127.0.0.1:%d", port+rank)
		var st stateReport
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			if code, body := get(base + "/debug/state"); code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil &&
				st.Step >= 3 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if st.Rank != rank || st.Step < 3 || st.Reducer == nil || st.Reducer.Buckets == 0 || st.Reducer.Params == 0 {
			t.Fatalf("rank %d: /debug/state %+v\n%s", rank, st, errOut.String())
		}
		if code, body := get(base + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK ||
			!strings.Contains(body, "goroutine profile") {
			t.Errorf("rank %d: /debug/pprof/goroutine: %d %.200s", rank, code, body)
		}
		if code, body := get(base + "/debug/flight"); code != http.StatusOK || !strings.Contains(body, `"entries"`) ||
			!strings.Contains(body, "all_reduce") {
			t.Errorf("rank %d: /debug/flight: %d %.300s", rank, code, body)
		}
	}
}

// A job that fails leaves a report: the launcher names a directory that
// holds every failed rank's goroutine stacks and state; a job that ends
// well leaves none.
func TestFailureReport(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the launcher makes the report's directory
	r := ddpTrain(t, args("--steps", "50", "--lr", "1e6")...)
	if r.code != exitDiverged {
		t.Fatalf("exit %d, want %d (diverged):\n%s", r.code, exitDiverged, r.stderr)
	}
	m := regexp.MustCompile(`ddp-train: report: (\S+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no report line:\n%s", r.stderr)
	}
	for rank := range 2 {
		dir := filepath.Join(m[1], fmt.Sprintf("rank-%d", rank))
		stacks, err := os.ReadFile(filepath.Join(dir, "stacks.txt"))
		if err != nil || !strings.Contains(string(stacks), "goroutine ") {
			t.Errorf("rank %d: stacks.txt: %v %.100s", rank, err, stacks)
		}
		var st struct {
			stateReport
			Error string `json:"error"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "state.json"))
		if err == nil {
			err = json.Unmarshal(b, &st)
		}
		if err != nil || st.Rank != rank || st.Step < 1 || !strings.Contains(st.Error, "diverged") {
			t.Errorf("rank %d: state.json: %v %+v", rank, err, st)
		}
	}
	if !strings.Contains(lastLine(r.stderr), "training diverged") {
		t.Errorf("the report line displaced the error from the last line:\n%s", r.stderr)
	}
	os.RemoveAll(m[1])
	if r := ddpTrain(t, args("--steps", "5")...); r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "ddp-train-report-*")); len(left) != 0 {
		t.Errorf("a run that ended well left %v", left)
	}
}
