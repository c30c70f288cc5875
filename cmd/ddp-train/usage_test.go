package main

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/goddp/ddp"
)

// --help prints the synopsis (usage line, description, examples) before
// the flags, and exits 0; --version prints one line to stdout and exits 0.
func TestHelpAndVersion(t *testing.T) {
	for _, flag := range []string{"--help", "-h"} {
		r := ddpTrain(t, flag)
		usage, desc, ex, flags := strings.Index(r.stderr, "Usage: ddp-train [flags]"), strings.Index(r.stderr, "data-parallel"),
			strings.Index(r.stderr, "Examples:\n  ddp-train"), strings.Index(r.stderr, "  -activation string")
		if r.code != 0 || usage != 0 || !(usage < desc && desc < ex && ex < flags) || !strings.Contains(r.stderr, "-version") {
			t.Errorf("%s: exit %d, synopsis at %d, description %d, examples %d, flags %d:\n%s", flag, r.code, usage, desc, ex, flags, r.stderr)
		}
	}
	r := ddpTrain(t, "--version")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 1 ||
		!strings.HasPrefix(lines[0], "ddp-train ") || !strings.Contains(lines[0], "go1.") || r.stderr != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := ddpTrain(t, "--version", "--no-such-flag"); r.code != 2 {
		t.Errorf("--version with an unknown flag: exit %d, want 2", r.code)
	}
}

func TestVersionLine(t *testing.T) {
	main := debug.Module{Path: "github.com/goddp/ddp", Version: "v1.2.3"}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "ddp-train " + ddp.Version + " (no build information)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: main}, "ddp-train v1.2.3 (github.com/goddp/ddp, go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/goddp/ddp"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-24T22:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"ddp-train " + ddp.Version + " (github.com/goddp/ddp, source tree, git abc123 2026-11-24T22:00:00Z, modified, go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: main, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			"ddp-train v1.2.3 (github.com/goddp/ddp, vcs abc123, go1.26.8)"},
	} {
		if got := versionLine(c.info); got != c.want {
			t.Errorf("versionLine: %q\nwant        %q", got, c.want)
		}
	}
}
