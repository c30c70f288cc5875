package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
)

// probe returns the status code of GET path on 127.0.0.1:port, or 0.
func probe(port int, path string) int {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitProbe polls until GET path answers want, or fails after 60 s.
func waitProbe(t *testing.T, port int, path string, want int, stderr fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if probe(port, path) == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s on port %d never answered %d; last %d\n%s", path, port, want, probe(port, path), stderr)
}

// Kubernetes' probes on the metrics port, as a pod started by an Indexed
// Job sees them: rank 1 is up (/healthz 200) but not ready (/readyz 503)
// while it waits for rank 0 at the rendezvous; once rank 0 starts, the
// group forms and /readyz answers 200.
func TestHealthAndReadinessProbes(t *testing.T) {
	port := freePortPair(t)
	store, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func(rank int) (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command(self, args("--steps", "1000000", "--log-every", "1000000", "--timeout", "60s",
			"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))...)
		cmd.Env = cleanEnv("GODDP_SECRET="+secret, "MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", store),
			"WORLD_SIZE=2", fmt.Sprintf("JOB_COMPLETION_INDEX=%d", rank))
		var errOut strings.Builder
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopJob(t, cmd) })
		return cmd, &errOut
	}
	_, errOut1 := start(1)
	waitProbe(t, port+1, "/healthz", http.StatusOK, errOut1)
	if code := probe(port+1, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a rank still at the rendezvous: %d, want 503\n%s", code, errOut1)
	}
	_, errOut0 := start(0)
	waitProbe(t, port+1, "/readyz", http.StatusOK, errOut1)
	waitProbe(t, port, "/readyz", http.StatusOK, errOut0)
}
