package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg/env"
	"go.uber.org/zap"
)

// TestNCCLLoadFailsInOneLine: without NCCL (here: GODDP_NCCL_LIBRARY
// naming a file that does not exist, the only place then tried),
// --backend nccl fails at once with a usage error (exit 2) of one line
// that names the place tried and how to point at the library.
func TestNCCLLoadFailsInOneLine(t *testing.T) {
	const missing = "/nonexistent/goddp-test/libnccl.so.2"
	t.Setenv("GODDP_NCCL_LIBRARY", missing)
	c, err := parseFlags([]string{"--backend", "nccl", "--nproc", "1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = joinGroup(context.Background(), c, env.Config{Rank: 0, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 1},
		zap.NewNop())
	if err == nil {
		t.Fatal("joinGroup with a missing NCCL succeeded")
	}
	msg := err.Error()
	if !isUsage(err) || strings.Contains(msg, "\n") || !strings.Contains(msg, missing) ||
		!strings.Contains(msg, "GODDP_NCCL_LIBRARY") {
		t.Errorf("got %q (usage error: %v); want one line naming %s and GODDP_NCCL_LIBRARY, as a usage error", msg,
			isUsage(err), missing)
	}
	var sb strings.Builder
	if code := report(&sb, err); code != 2 || strings.Count(sb.String(), "\n") != 1 {
		t.Errorf("report: exit %d, printed %q; want exit 2 and one line", code, sb.String())
	}
}
