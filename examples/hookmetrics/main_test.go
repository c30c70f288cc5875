package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One process (no launcher: a job of one rank) with the custom hook and
// --metrics-addr: while it trains, /metrics serves the hook's counter and
// the reducer's DDP metrics from the same registry.
func TestHookAndMetrics(t *testing.T) {
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), config{steps: 2000, clip: 0.01, metricsAddr: "127.0.0.1:0"}, ready)
	}()
	addr := <-ready
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if strings.Contains(body, "ddp_iterations_total") && !strings.Contains(body, "example_clipped_buckets_total 0\n") {
				break // trained a step, and clipped
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"example_clipped_buckets_total", "ddp_iterations_total",
		"ddp_bucket_allreduce_seconds"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "example_clipped_buckets_total 0\n") {
		t.Errorf("the hook clipped nothing at --clip 0.01:\n%s", body)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
