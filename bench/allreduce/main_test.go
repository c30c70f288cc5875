package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestLocalPrintsCSV(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"--backend", "local", "--nproc", "3", "--sizes", "0,4096,65540", "--iters", "3"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != csvHeader || len(lines) != 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	if !strings.HasPrefix(lines[3], "65540,") {
		t.Fatalf("last row %q", lines[3])
	}
	if !strings.Contains(errOut.String(), "measured/bound") {
		t.Fatalf("no memory-bandwidth bound reported: %q", errOut.String())
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--backend", "mpi"}, {"--nproc", "0"}, {"--sizes", "12,x"}, {"--dtype", "int128"}} {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		var u usageError
		if !errors.As(err, &u) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

func TestBusbwFollowsNcclTests(t *testing.T) {
	r := result{bytes: 1000, perIter: 1000, n: 4} // 1 µs
	if r.algbw() != 1 || r.busbw() != 1.5 {
		t.Fatalf("algbw %v busbw %v, want 1 and 1.5", r.algbw(), r.busbw())
	}
}
