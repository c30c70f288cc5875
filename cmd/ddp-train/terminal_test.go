package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
	"golang.org/x/sys/unix"
)

// onPTY runs ddp-train with env and its stderr on a pseudo-terminal 100
// columns wide, and returns what the terminal received.
func onPTY(t *testing.T, env []string, args ...string) (code int, raw string) {
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
	cmd.Env = env
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

// On a terminal, ddp-train draws one bar, redrawn in place with "\r", with
// no figures before they are measured; every log line starts in column 0,
// after the bar's line has been cleared, and no line of the screen holds
// both a log line and a piece of the bar. Its own launcher draws the bar
// of its workers (tcp); --backend local draws its rank 0's; so does a
// worker under an external launcher whose stderr is a terminal.
func TestTerminalBar(t *testing.T) {
	common := []string{"--hidden", "16", "--samples", "512", "--batch-size", "16", "--timeout", "30s", "--steps", "60",
		"--log-every", "20"}
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	torchrun := cleanEnv("RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "LOCAL_WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1",
		"MASTER_PORT="+strconv.Itoa(port), "GODDP_SECRET=00112233445566778899aabbccddeeff")
	for name, env := range map[string][]string{"tcp": cleanEnv(), "local": cleanEnv(), "torchrun": torchrun} {
		t.Run(name, func(t *testing.T) {
			backend := map[string]string{"local": "local"}[name]
			if backend == "" {
				backend = "tcp"
			}
			code, raw := onPTY(t, env, append(common, "--backend", backend)...)
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
	if bars != 1 || !strings.Contains(strings.Join(lines, "\n"), " 60/60 loss ") || logs < 1 {
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

// The console holds the start of a line until its end comes, prints whole
// lines above the bar (clearing the bar's line first, drawing it again
// after), and once the bar has ended prints lines as they are.
func TestConsoleWritesAboveTheBar(t *testing.T) {
	var b strings.Builder
	c := &console{w: &b, width: func() int { return 70 }, began: time.Now(), stop: make(chan struct{})}
	c.show(progressReport{Step: 1, Total: 10, LogEvery: 5})
	c.Write([]byte("half "))
	if strings.Contains(b.String(), "half") {
		t.Errorf("the start of a line was printed over the bar: %q", b.String())
	}
	c.Write([]byte("a line\nand "))
	c.show(progressReport{Step: 5, Total: 10, LogEvery: 5, Measured: true, Figures: figures{Loss: 1, Accuracy: 0.5}})
	c.Write([]byte("more\n"))
	c.end()
	c.Write([]byte("after\nunended"))
	c.close()
	got := screen(b.String())
	want := []string{"half a line", "and more", barLine(5, 10, figures{Loss: 1, Accuracy: 0.5}, 70), "after", "unended"}
	if !slices.Equal(got, want) {
		t.Errorf("the screen:\n%s\nwant:\n%s\n(raw %q)", strings.Join(got, "\n"), strings.Join(want, "\n"), b.String())
	}
}

// Before the first figures the bar says how far and how long, and when
// the figures come; it fits the terminal as barLine does.
func TestWaitLine(t *testing.T) {
	for _, cols := range []int{0, 1, 20, 80, 300} {
		for _, r := range []progressReport{{}, {Step: 7, Total: 100, LogEvery: 50}, {Step: 57, Total: 100, LogEvery: 50}} {
			line := waitLine(r, 1500*time.Millisecond, cols)
			if len(line) > max(cols-1, 0) {
				t.Errorf("%d columns: %q", cols, line)
			}
			if cols == 80 && r.Total == 0 && !strings.HasSuffix(line, "] starting... 2s") {
				t.Errorf("before the first step: %q", line)
			}
			if want := map[int]string{7: "] 7/100 1.5s, figures at step 50",
				57: "] 57/100 1.5s, figures at step 100"}[r.Step]; cols == 80 && r.Total > 0 && !strings.HasSuffix(line, want) {
				t.Errorf("before the first figures (a resumed run's at step 57): %q, want ...%q", line, want)
			}
		}
	}
}
