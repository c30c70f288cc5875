package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/ft"
)

const testLighthouseSecret = "00112233445566778899aabbccddeeff"

func secretLookup(v string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == "GODDP_SECRET" && v != "" {
			return v, true
		}
		return "", false
	}
}

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLighthouseCommand: `ddp-train lighthouse` serves quorums to
// clients holding GODDP_SECRET, logs them, and stops when its context
// ends.
func TestLighthouseCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	addrc, done := make(chan string, 1), make(chan int, 1)
	go func() {
		done <- lighthouseMain(ctx, []string{"--listen", "127.0.0.1:0", "--min-replicas", "2", "--join-timeout", "1s"},
			secretLookup(testLighthouseSecret), &stderr, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case code := <-done:
		t.Fatalf("exit %d before listening: %s", code, stderr.String())
	}
	secret, err := ft.DecodeSecret(testLighthouseSecret)
	if err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	defer qcancel()
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		c, err := ft.NewClient(addr, secret, id, ft.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			if q, err := c.Quorum(qctx, ft.Member{Step: 3}); err != nil || q.ID != 1 || len(q.Members) != 2 {
				t.Errorf("%s: %v (%v), want quorum 1 of two", id, q, err)
			}
		})
	}
	wg.Wait()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0: %s", code, stderr.String())
	}
	if log := stderr.String(); !strings.Contains(log, `"members": ["a", "b"]`) || !strings.Contains(log, "stopped") {
		t.Errorf("the log names no quorum of a and b, or no stop:\n%s", log)
	}
}

// TestLighthouseCommandRefuses: no secret, a short one, and missing or
// bad flags are exit 2 with the reason.
func TestLighthouseCommandRefuses(t *testing.T) {
	ok := []string{"--listen", "127.0.0.1:0", "--min-replicas", "1"}
	cases := []struct {
		name, secret string
		args         []string
		want         string
	}{
		{"no secret", "", ok, "GODDP_SECRET is not set"},
		{"short secret", "short", ok, "at least 16"},
		{"no listen", testLighthouseSecret, []string{"--min-replicas", "1"}, "needs --listen"},
		{"no min replicas", testLighthouseSecret, []string{"--listen", "127.0.0.1:0"}, "--min-replicas of at least 1"},
		{"unknown flag", testLighthouseSecret, append([]string{"--bogus"}, ok...), "flag provided but not defined"},
		{"argument", testLighthouseSecret, append(ok, "extra"), "takes no arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := lighthouseMain(context.Background(), c.args, secretLookup(c.secret), &stderr, nil)
			if code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, want 2 and %q in:\n%s", code, c.want, stderr.String())
			}
		})
	}
}

// TestLighthouseCommandSIGTERM: ddp-train lighthouse as a process stops
// at SIGTERM with 143.
func TestLighthouseCommandSIGTERM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "lighthouse", "--listen", "127.0.0.1:0", "--min-replicas", "1", "--log-format", "json")
	cmd.Env = append(os.Environ(), "GODDP_SECRET="+testLighthouseSecret)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pipe)
	listening := regexp.MustCompile(`"msg":"lighthouse listening".*"addr":"([^"]+)"`)
	for sc.Scan() {
		if listening.MatchString(sc.Text()) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("exit %d (%v), want 143", code, err)
	}
}
