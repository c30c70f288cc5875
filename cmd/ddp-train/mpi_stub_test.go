//go:build !mpi

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBackendMPIWithoutTheTagSaysToRebuild(t *testing.T) {
	var out, errOut bytes.Buffer
	none := func(string) (string, bool) { return "", false }
	if code := run(args("--backend", "mpi", "--steps", "1"), none, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "go build -tags mpi ./cmd/ddp-train") {
		t.Fatalf("the error does not say how to rebuild: %s", errOut.String())
	}
}
