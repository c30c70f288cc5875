package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onPTY runs ddp-train with its stderr on a pseudo-terminal 100 columns
// wide, and returns what the terminal received.
func onPTY(t *testing.T, args ...string) (code int, raw string) {
	t.Helper()
	ptmx, pts := openPTY(t)
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 100}); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child holds the terminal now: reading ends when it exits
	read := make(chan []byte)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			b.Write(buf[:n])
			if err != nil { // EIO once no process holds the terminal
				break
			}
		}
		read <- b.Bytes()
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-read:
		return code, strings.ReplaceAll(string(b), "\r\n", "\n") // the terminal's ONLCR
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal was not released after ddp-train exited")
	}
	return 0, ""
}

// screen plays raw as a terminal would ("\r" to column 0, "\x1b[K" erases
// to the end of the line, "\n" the next line) and returns its lines.
func screen(raw string) []string {
	var lines []string
	var line []byte
	col := 0
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == '\r':
			col = 0
		case raw[i] == '\n':
			lines, line, col = append(lines, string(line)), nil, 0
		case strings.HasPrefix(raw[i:], "\x1b[K"):
			line = line[:min(col, len(line))]
			i += 2
		default:
			if col < len(line) {
				line[col] = raw[i]
			} else {
				line = append(line, raw[i])
			}
			col++
		}
	}
	if len(line) > 0 {
		lines = append(lines, string(line))
	}
	return lines
}

var (
	logStartRE = regexp.MustCompile(`(\[rank \d+\] )?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)
	barRE      = regexp.MustCompile(`^\[[= ]+\] `)
)

// On a terminal, the launcher (every backend) draws one bar, redrawn in
// place with "\r", with no figures before they are measured; every log
// line starts in column 0, after the bar's line has been cleared, and no
// line of the screen holds both a log line and a piece of the bar.
func TestTerminalBar(t *testing.T) {
	common := []string{"--hidden", "16", "--samples", "512", "--batch-size", "16", "--timeout", "30s", "--steps", "60", "--log-every", "20"}
	for _, backend := range []string{"tcp", "local"} {
		t.Run(backend, func(t *testing.T) {
			code, raw := onPTY(t, append(common, "--backend", backend)...)
			if code != 0 {
				t.Fatalf("exit %d\n%q", code, raw)
			}
			checkBar(t, raw)
			if testing.Verbose() {
				t.Logf("the terminal received:\n%q", raw)
			}
		})
	}
}

func checkBar(t *testing.T, raw string) {
	t.Helper()
	inPlace := false
	for _, l := range strings.Split(raw, "\n") {
		inPlace = inPlace || strings.Count(l, "\r[") >= 2
	}
	if !inPlace {
		t.Errorf("the bar was never redrawn in place (\\r) on one line:\n%q", raw)
	}
	if strings.Contains(raw, "loss 0.0000") {
		t.Errorf("the bar showed figures before they were measured:\n%q", raw)
	}
	for _, at := range logStartRE.FindAllStringIndex(raw, -1) {
		before := raw[:at[0]]
		if at[0] > 0 && !strings.HasSuffix(before, "\n") && !strings.HasSuffix(before, clearLine) {
			t.Errorf("a log line starts after %q, not in column 0 of a cleared line:\n%q", before[max(len(before)-40, 0):], raw)
		}
	}
	lines, bars, logs := screen(raw), 0, 0
	for _, l := range lines {
		isLog, isBar := logStartRE.MatchString(l), barRE.MatchString(l)
		switch {
		case isLog && (isBar || strings.Contains(l, "[=") || strings.Contains(l, "samples/s comm")):
			t.Errorf("a log line and the bar share a line of the screen: %q", l)
		case isLog && logStartRE.FindStringIndex(l)[0] != 0:
			t.Errorf("a log line does not start in column 0: %q", l)
		case isLog:
			logs++
		case isBar:
			bars++
		}
	}
	if bars != 1 || !strings.Contains(strings.Join(lines, "\n"), " 60/60 loss ") || logs < 2 {
		t.Errorf("the screen holds %d bars (want 1, at 60/60) and %d log lines:\n%s", bars, logs, strings.Join(lines, "\n"))
	}
}

// maxDefaultLines is what a default run may print when not on a
// terminal (README's first run): the setup lines of each rank, a "train"
// line every --log-every steps, and "done".
const maxDefaultLines = 40

func TestDefaultRunIsShort(t *testing.T) {
	r := ddpTrain(t, "--timeout", "60s")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	all := r.stdout + r.stderr
	if n := strings.Count(all, "\n"); n > maxDefaultLines {
		t.Errorf("a default run printed %d lines, want at most %d:\n%s", n, maxDefaultLines, all)
	}
	if strings.Contains(all, "DDP runtime stats") || strings.Contains(all, "\r") {
		t.Errorf("per-step statistics, or a bar, in a default run's log:\n%s", all)
	}
	if n := strings.Count(r.stderr, "param_digest"); n != 2 {
		t.Errorf("%d param_digest lines, want one per rank:\n%s", n, all)
	}
}

// The sampled per-step statistics are still there at --log-level debug.
func TestLogLevelDebugShowsRuntimeStats(t *testing.T) {
	r := ddpTrain(t, args("--steps", "3", "--log-level", "debug")...)
	if r.code != 0 || strings.Count(r.stderr, "DDP runtime stats") != 6 {
		t.Errorf("exit %d; want 3 runtime-stats lines from each rank:\n%s", r.code, r.stderr)
	}
	if r := ddpTrain(t, args("--log-level", "loud")...); r.code != 2 || !strings.Contains(r.stderr, "--log-level") {
		t.Errorf("--log-level loud: exit %d\n%s", r.code, r.stderr)
	}
}
