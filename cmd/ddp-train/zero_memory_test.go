package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestZeroMemoryTable measures, for docs/optimizers.md, rank 0's optimizer
// state and the peaks of the tcp workers (VmHWM, RssAnon, RssShmem, each
// the largest over the workers and the run) with Adam at 1 to 4 ranks,
// with and without --zero, on an MLP (--hidden GODDP_ZERO_MEMORY_HIDDEN,
// default 2048,2048,2048: 8.47M parameters; --dtype
// GODDP_ZERO_MEMORY_DTYPE, default float32; --shm GODDP_ZERO_MEMORY_SHM,
// default true). It runs only with GODDP_ZERO_MEMORY_TABLE=1: it is a
// measurement, not a check. It logs one Markdown row per run.
func TestZeroMemoryTable(t *testing.T) {
	if os.Getenv("GODDP_ZERO_MEMORY_TABLE") != "1" {
		t.Skip("a measurement: set GODDP_ZERO_MEMORY_TABLE=1")
	}
	dir, hidden := t.TempDir(), cmp.Or(os.Getenv("GODDP_ZERO_MEMORY_HIDDEN"), "2048,2048,2048")
	dtype := cmp.Or(os.Getenv("GODDP_ZERO_MEMORY_DTYPE"), "float32")
	shm := cmp.Or(os.Getenv("GODDP_ZERO_MEMORY_SHM"), "true")
	t.Logf("--hidden %s --dtype %s --shm=%s", hidden, dtype, shm)
	t.Log("| ranks | --zero | rank 0's optimizer state | worker peak RSS (VmHWM) | RssAnon | RssShmem |")
	for _, n := range []int{1, 2, 3, 4} {
		for _, zero := range []bool{false, true} {
			sum := dir + "/s.json"
			flags := []string{"--backend", "tcp", "--nproc", strconv.Itoa(n), "--samples", "512", "--hidden",
				hidden, "--dtype", dtype, "--shm=" + shm, "--optimizer", "adam", "--steps", "3", "--batch-size", "16",
				"--log-format", "json", "--timeout", "120s", "--summary", sum}
			if zero {
				flags = append(flags, "--zero")
			}
			p := workerPeaks(t, flags...)
			t.Logf("| %d | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |", n, zero,
				mib(summaryStateBytes(t, sum)), mib(p.hwm), mib(p.anon), mib(p.shmem))
		}
	}
}

// memPeaks are the largest VmHWM, RssAnon and RssShmem of a run's
// workers, in bytes.
type memPeaks struct{ hwm, anon, shmem int64 }

// workerPeaks runs ddp-train, polling its workers' /proc/PID/status every
// 10ms, and returns their peaks; it fails the test unless the run
// succeeds.
func workerPeaks(t *testing.T, args ...string) memPeaks {
	t.Helper()
	run := startTrain(t, args...)
	pid := run.cmd.Process.Pid
	var p memPeaks
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				status := "/proc/" + c + "/status"
				p.hwm = max(p.hwm, kBField(status, "VmHWM"))
				p.anon = max(p.anon, kBField(status, "RssAnon"))
				p.shmem = max(p.shmem, kBField(status, "RssShmem"))
			}
		}
		select {
		case <-run.done:
			if code := run.wait(t); code != 0 {
				t.Fatalf("exit %d\n%s", code, run.stderr.String())
			}
			return p
		case <-time.After(10 * time.Millisecond):
		}
	}
}
