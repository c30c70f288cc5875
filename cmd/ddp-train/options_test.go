package main

import "testing"

// TestOptionsThatKeepTheResult: flags that change how gradients move but
// not what they are end with bitwise the parameters of the default run:
// --gradient-as-bucket-view (views instead of a copy back), and
// --comm-hook hierarchical on one host (the leaders' group is one rank).
// Closing the hook's subgroups at the end must not fail the run.
func TestOptionsThatKeepTheResult(t *testing.T) {
	base := ddpTrain(t, args("--nproc", "2", "--steps", "12")...)
	if base.code != 0 {
		t.Fatalf("exit %d\n%s", base.code, base.stderr)
	}
	want := digests(base.stderr)["0"]
	for _, extra := range [][]string{
		{"--gradient-as-bucket-view"},
		{"--comm-hook", "hierarchical"},
	} {
		r := ddpTrain(t, args(append([]string{"--nproc", "2", "--steps", "12"}, extra...)...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s", extra, r.code, r.stderr)
		}
		d := digests(r.stderr)
		if len(d) != 2 || d["0"] != want || d["1"] != want {
			t.Fatalf("%v: digests %v, want both %s as without it\n%s", extra, d, want, r.stderr)
		}
	}
}
