package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A ctx that ends while the workers are being started stops Run at once:
// it starts no more, and kills and reaps those it started (Note [stopping
// mid-spawn]).
func TestRunStopsMidSpawn(t *testing.T) {
	const n = 400
	s := spec(t, "catch", n) // each waits for a signal, up to a minute
	token := fmt.Sprintf("GODDP_LAUNCH_TEST_TOKEN=%d", time.Now().UnixNano())
	s.Env = append(s.Env, token)
	s.Grace = time.Minute // a graceful stop would take this long
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := &Interrupted{Signal: syscall.SIGTERM}
	time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	err := Run(ctx, s)
	took := time.Since(start)
	var in *Interrupted
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "stopped after starting") {
		t.Fatalf("got %v, want the interruption, mid-spawn", err)
	}
	if took > 300*time.Millisecond+2*time.Second {
		t.Fatalf("Run returned %v after it was started, %v after ctx ended: %v", took, took-300*time.Millisecond, err)
	}
	if left := processesWith(token); len(left) > 0 {
		t.Fatalf("workers %v outlived Run", left)
	}
	t.Logf("%v after %v", err, took)
}

// processesWith lists the live processes whose environment holds kv.
func processesWith(kv string) []int {
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] == "Z" {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(st), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), kv) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		pids = append(pids, pid)
	}
	return pids
}
