package main

import (
	"testing"
	"time"
)

// Note [restart backoff]: the wait doubles while a replica keeps dying
// soon after it starts, up to 30 s, and goes back to --restart-backoff
// after a life of 30 s or more.
func TestRestartWait(t *testing.T) {
	const base = time.Second
	wait := time.Duration(0)
	var got []time.Duration
	for range 7 {
		wait = restartWait(wait, base, 2*time.Second)
		got = append(got, wait)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("waits after quick deaths %v, want %v seconds", got, want)
		}
	}
	if w := restartWait(30*time.Second, base, 45*time.Second); w != base {
		t.Errorf("after a 45 s life the wait is %v, want --restart-backoff's %v", w, base)
	}
}
