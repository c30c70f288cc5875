package main

import (
	"fmt"
	"testing"
)

// TestHooksWithMetrics: with --metrics-addr the reducer counts the bytes
// the comm hook sends through a wrapper of the group; the hooks that need
// more than the five collectives (adasum: Send and Recv; hierarchical:
// Split) still find them, and the run ends with bitwise the parameters of
// the same run without metrics.
func TestHooksWithMetrics(t *testing.T) {
	for _, hook := range []string{"adasum", "hierarchical"} {
		t.Run(hook, func(t *testing.T) {
			common := []string{"--nproc", "2", "--steps", "12", "--comm-hook", hook}
			base := ddpTrain(t, args(common...)...)
			if base.code != 0 {
				t.Fatalf("without metrics: exit %d\n%s", base.code, base.stderr)
			}
			want := digests(base.stderr)
			if len(want) != 2 || want["0"] != want["1"] {
				t.Fatalf("without metrics: digests %v\n%s", want, base.stderr)
			}
			addr := fmt.Sprintf("127.0.0.1:%d", freePortPair(t))
			r := ddpTrain(t, args(append(common, "--metrics-addr", addr)...)...)
			if r.code != 0 {
				t.Fatalf("--metrics-addr %s: exit %d\n%s", addr, r.code, r.stderr)
			}
			if d := digests(r.stderr); len(d) != 2 || d["0"] != want["0"] || d["1"] != want["0"] {
				t.Fatalf("--metrics-addr %s: digests %v, want both %s as without it\n%s", addr, d, want["0"], r.stderr)
			}
		})
	}
}
