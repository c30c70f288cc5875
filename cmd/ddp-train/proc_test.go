package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitForWorker finds the child of parent whose environment says RANK=rank.
func waitForWorker(t *testing.T, parent int, rank string) int {
	t.Helper()
	return waitForChild(t, parent, "RANK="+rank)
}

// waitForChild waits for a child of parent whose environment holds kv,
// and returns its pid.
func waitForChild(t *testing.T, parent int, kv string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, st := range stats {
			b, err := os.ReadFile(st)
			if err != nil {
				continue
			}
			fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(fields) < 2 || fields[1] != strconv.Itoa(parent) {
				continue
			}
			dir := filepath.Dir(st)
			env, err := os.ReadFile(filepath.Join(dir, "environ"))
			if err != nil {
				continue
			}
			for _, e := range strings.Split(string(env), "\x00") {
				if e == kv {
					pid, _ := strconv.Atoi(filepath.Base(dir))
					return pid
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no child with %s under pid %d", kv, parent)
	return 0
}

func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
