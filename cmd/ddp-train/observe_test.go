package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The metrics the issue names, and the straggler's, as every rank serves
// them (ddp_errors_total appears with the first error).
var servedMetrics = []string{
	"ddp_bucket_allreduce_seconds", "ddp_forward_seconds", "ddp_backward_compute_seconds", "ddp_backward_comm_seconds",
	"ddp_comm_exposed_seconds", "ddp_collective_seconds", "ddp_bucket_bytes", "ddp_buckets", "ddp_compression_ratio",
	"ddp_iterations_total", "ddp_comm_bytes_total", "ddp_bucket_rebuilds_total", "ddp_last_bucket_wait_seconds",
	"ddp_collective_bytes_total", "ddp_train_step", "ddp_train_samples_total", "go_goroutines",
	"process_cpu_seconds_total",
}

// TestMetricsEndpointOfARunningJob starts a two-worker TCP job with
// --metrics-addr, scrapes each worker's /metrics (port+rank) while it
// trains, and checks every metric is there with its rank and backend
// labels, and that promtool's lint finds nothing.
func TestMetricsEndpointOfARunningJob(t *testing.T) {
	port, errOut := startMetricsJob(t)
	for rank := range 2 {
		body := scrapeUntil(t, port+rank, func(body string) bool { return value(body, "ddp_iterations_total", rank) >= 3 },
			errOut)
		for _, name := range servedMetrics {
			if !strings.Contains(body, "\n"+name) {
				t.Errorf("rank %d: /metrics lacks %s", rank, name)
			}
		}
		if !strings.Contains(body, fmt.Sprintf(`ddp_iterations_total{backend="tcp",rank="%d"}`, rank)) {
			t.Errorf("rank %d: ddp_iterations_total without its backend and rank labels:\n%s", rank,
				grep(body, "ddp_iterations_total"))
		}
		if n := value(body, "ddp_forward_seconds_count", rank); n < 1 {
			t.Errorf("rank %d: ddp_forward_seconds has %v observations: the backward mark did not fire", rank, n)
		}
		if n := value(body, `ddp_collective_seconds_count{backend="tcp",op="allreduce"`, rank); n < 1 {
			t.Errorf("rank %d: no allreduce observed at the process group level:\n%s", rank,
				grep(body, "ddp_collective_seconds_count"))
		}
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("rank %d: promlint: %s: %s", rank, p.Metric, p.Text)
		}
	}
}

// startMetricsJob starts a two-worker job that trains until stopped, with
// --metrics-addr on two free consecutive ports, and returns the first
// port and the job's stderr; the job is stopped when the test ends.
func startMetricsJob(t *testing.T) (int, *strings.Builder) {
	t.Helper()
	port := freePortPair(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self,
		args("--nproc", "2", "--steps", "1000000", "--log-every", "1000000", "--metrics-addr",
			fmt.Sprintf("127.0.0.1:%d", port))...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	errOut := new(strings.Builder)
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopJob(t, cmd) })
	return port, errOut
}

// TestTimelineFiles runs a short two-worker job with --timeline and small
// buckets, and reads each rank's trace: valid JSON, one step per
// optimizer step, forward before backward, and after the rebuild the
// first bucket launched before backward ended.
func TestTimelineFiles(t *testing.T) {
	dir := t.TempDir()
	const steps = 4
	r := ddpTrain(t,
		args("--nproc", "2", "--steps", strconv.Itoa(steps), "--timeline", dir, "--first-bucket-mb", "0.0005",
			"--bucket-cap-mb", "0.002")...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", rank)))
		if err != nil {
			t.Fatal(err)
		}
		var events []struct {
			Name, Ph string
			Pid      int
			Ts, Dur  float64
			Args     map[string]any
		}
		if err := json.Unmarshal(b, &events); err != nil {
			t.Fatalf("rank %d: the trace is not valid JSON: %v", rank, err)
		}
		type slice struct{ start, end float64 }
		byName := map[string][]slice{}
		for _, e := range events {
			if e.Ph == "X" && e.Pid == rank {
				byName[e.Name] = append(byName[e.Name], slice{e.Ts, e.Ts + e.Dur})
			}
			if e.Name == "launch" && e.Args["bucket"] == 0.0 {
				byName["launch0"] = append(byName["launch0"], slice{e.Ts, e.Ts + e.Dur})
			}
		}
		for _, s := range byName {
			slices.SortFunc(s, func(a, b slice) int { return cmp.Compare(a.start, b.start) })
		}
		fwd, bwd, launch0 := byName["forward"], byName["backward"], byName["launch0"]
		if len(byName["step"]) != steps || len(fwd) != steps || len(bwd) != steps || len(launch0) != steps ||
			len(byName["communication"]) < steps {
			t.Fatalf("rank %d: steps %d, forward %d, backward %d, bucket 0 launches %d, communications %d; want %d of each",
				rank, len(byName["step"]), len(fwd), len(bwd), len(launch0), len(byName["communication"]), steps)
		}
		for k := range steps {
			if fwd[k].end > bwd[k].start+1 {
				t.Errorf("rank %d step %d: forward ends after backward starts", rank, k+1)
			}
			if k > 0 && launch0[k].start >= bwd[k].end {
				t.Errorf("rank %d step %d: bucket 0 launched at %.3f, after backward ended at %.3f", rank, k+1, launch0[k].start,
					bwd[k].end)
			}
		}
	}
}

// freePortPair finds a port p such that p and p+1 are free on loopback.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 20 {
		p, err := launch.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no two consecutive free ports")
	return 0
}

// scrapeUntil polls /metrics on port until ok says the body is what the
// test needs, for up to 60 seconds.
func scrapeUntil(t *testing.T, port int, ok func(string) bool, stderr fmt.Stringer) string {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	client := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if last = string(b); resp.StatusCode == http.StatusOK && ok(last) {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never had what the test waits for; last body:\n%s\nstderr:\n%s", url, last, stderr)
	return ""
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// value is the sample of the series whose text starts with prefix and
// whose rank label is rank, or -1.
func value(body, prefix string, rank int) float64 {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		m := sampleRE.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(line, prefix) || !strings.Contains(m[2], fmt.Sprintf(`rank="%d"`, rank)) {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err == nil {
			return v
		}
	}
	return -1
}

func grep(body, s string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// stopJob interrupts the launcher, which stops its workers, and waits.
func stopJob(t *testing.T, cmd *exec.Cmd) {
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Errorf("ddp-train did not stop within 30s of an interrupt")
	}
}

// The Grafana dashboard in docs/ is valid JSON and queries only metrics
// that ddp-train serves.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	known := append(slices.Clone(servedMetrics), "ddp_errors_total", "ddp_train_loss", "process_resident_memory_bytes",
		// on the first step, and a straggler: straggler_test.go
		"ddp_straggler_last_total", "ddp_straggler_arrival_skew_seconds")
	name := regexp.MustCompile(`\b(ddp|go|process)_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			queries++
			for _, m := range name.FindAllString(q.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b := strings.TrimSuffix(m, suffix); b != m && slices.Contains(known, b) {
						base = b
					}
				}
				if !slices.Contains(known, base) {
					t.Errorf("panel %q queries %s, which ddp-train does not serve", p.Title, m)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("the dashboard has %d queries", queries)
	}
}
