package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// arrival picks the least wait as the last to arrive, by the gap to the
// next-least, with the skew to the largest.
func TestStragglerArrival(t *testing.T) {
	for _, c := range []struct {
		waits      []int64
		last       int
		late, skew time.Duration
	}{
		{[]int64{30000, 100, 29000}, 1, 28900 * time.Microsecond, 29900 * time.Microsecond},
		{[]int64{5, 5, 9}, 0, 0, 4 * time.Microsecond},
		{[]int64{7, 3}, 1, 4 * time.Microsecond, 4 * time.Microsecond},
		{[]int64{3, 7, 1, 2}, 2, 1 * time.Microsecond, 6 * time.Microsecond},
	} {
		last, late, skew := arrival(c.waits)
		if last != c.last || late != c.late || skew != c.skew {
			t.Errorf("arrival(%v) = %d, %v, %v; want %d, %v, %v", c.waits, last, late, skew, c.last, c.late, c.skew)
		}
	}
}

// A rank last by more than the margin in more than the share of the
// window is named once, in the metric and in rank 0's warning; ranks
// that take turns being last are never named.
func TestStragglerWarnsOnPersistentLast(t *testing.T) {
	f := stragglerFlags{stragglerWindow: 10, stragglerShare: 0.8, stragglerMargin: 0.1}
	run := func(lastOf func(step int) int) (*observer.ObservedLogs, trainingMetrics) {
		core, logs := observer.New(zap.WarnLevel)
		m := newTrainingMetrics()
		s := newStragglers(f, 0, zap.New(core), &m)
		now := time.Unix(0, 0)
		for step := range 40 {
			waits := []int64{20000, 20000, 20000}
			waits[lastOf(step)] = 1000 // 19 ms late in a 40 ms step
			now = now.Add(40 * time.Millisecond)
			s.observe(waits, time.Millisecond, now)
		}
		return logs, m
	}
	logs, m := run(func(int) int { return 2 })
	if logs.Len() != 1 || !strings.Contains(logs.All()[0].Message, "straggler: rank 2 arrived last") {
		t.Errorf("warnings for a persistent rank 2: %v", logs.All())
	}
	if n := testutil.ToFloat64(m.last.WithLabelValues("2")); n != 39 {
		t.Errorf("ddp_straggler_last_total{rank=\"2\"} = %v; want 39 (every step but the first)", n)
	}
	logs, _ = run(func(step int) int { return step % 3 })
	if logs.Len() != 0 {
		t.Errorf("ranks taking turns were named: %v", logs.All())
	}
}

// A rank slowed on purpose (GODDP_TEST_SLOW_RANK, 30 ms of every step) is
// named by the metric and the warning; an even run names no rank: Note
// [stragglers, measured].
func TestStragglerSlowRankNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 worker processes, twice")
	}
	port := freePortPair(t)
	self, _ := os.Executable()
	cmd := exec.Command(self,
		args("--nproc", "3", "--steps", "1000000", "--log-every", "1000000", "--metrics-addr",
			fmt.Sprintf("127.0.0.1:%d", port))...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", testSlowEnv+"=1:30ms")
	var errOut lockedBuffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	warning := regexp.MustCompile(`straggler: rank (\d) arrived last`)
	body := scrapeUntil(t, port, func(body string) bool {
		return value(body, "ddp_straggler_last_total", 1) >= 60 && warning.MatchString(errOut.String())
	}, &errOut)
	stopJob(t, cmd)
	for _, r := range []int{0, 2} {
		if n := value(body, "ddp_straggler_last_total", r); n > 5 {
			t.Errorf("ddp_straggler_last_total of rank %d = %v, beside rank 1's %v", r, n,
				value(body, "ddp_straggler_last_total", 1))
		}
	}
	if !strings.Contains(body, "ddp_straggler_arrival_skew_seconds_count") {
		t.Errorf("no arrival skew histogram:\n%s", grep(body, "ddp_straggler"))
	}
	for _, m := range warning.FindAllStringSubmatch(errOut.String(), -1) {
		t.Logf("%s", m[0])
		if m[1] != "1" {
			t.Errorf("the warning names rank %s, not the slowed rank 1:\n%s", m[1], grep(errOut.String(), "straggler"))
		}
	}
	even := ddpTrain(t, args("--nproc", "3", "--steps", "300", "--log-every", "1000")...)
	if even.code != 0 || warning.MatchString(even.stderr) {
		t.Errorf("an even run: exit %d, and a straggler named:\n%s", even.code, grep(even.stderr, "straggler"))
	}
}
