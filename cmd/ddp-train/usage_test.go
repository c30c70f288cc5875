package main

import (
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp"
)

// --help prints the synopsis (usage line, description, examples) before
// the flags, and exits 0; --version prints one line to stdout and exits 0.
func TestHelpAndVersion(t *testing.T) {
	for _, flag := range []string{"--help", "-h"} {
		r := ddpTrain(t, flag)
		usage, desc, ex, flags := strings.Index(r.stderr, "Usage: ddp-train [flags]"), strings.Index(r.stderr,
			"data-parallel"),
			strings.Index(r.stderr, "Examples:\n  ddp-train"), strings.Index(r.stderr, "  --activation string")
		if r.code != 0 || usage != 0 || !(usage < desc && desc < ex && ex < flags) ||
			!strings.Contains(r.stderr, "\n  --version\n") || strings.Contains(r.stderr, "\n  -v") {
			t.Errorf("%s: exit %d, synopsis at %d, description %d, examples %d, flags %d:\n%s", flag, r.code, usage, desc, ex,
				flags, r.stderr)
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

// A flag typo prints one line naming it and one hint (a near flag, where
// the usage is), not the usage, and exits 2.
func TestFlagTypo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--lerning-rate", "0.1"}, []string{
			"ddp-train: flag provided but not defined: --lerning-rate",
			"Did you mean --lr? Run 'ddp-train --help' for usage."}},
		{[]string{"--step", "3"}, []string{
			"ddp-train: flag provided but not defined: --step",
			"Did you mean --steps? Run 'ddp-train --help' for usage."}},
		{[]string{"--lr", "fast"}, []string{
			`ddp-train: invalid value "fast" for flag --lr: parse error`,
			"Run 'ddp-train --help' for usage."}},
		{[]string{"--zzzzzz"}, []string{
			"ddp-train: flag provided but not defined: --zzzzzz",
			"Run 'ddp-train --help' for usage."}},
	} {
		r := ddpTrain(t, c.args...)
		if got := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); r.code != 2 || r.stdout != "" ||
			!slices.Equal(got, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and:\n%s", c.args, r.code, r.stdout, r.stderr,
				strings.Join(c.want, "\n"))
		}
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
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/goddp/ddp"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"},
				{Key: "vcs.time", Value: "2026-11-24T22:00:00Z"},
				{Key: "vcs.modified", Value: "true"}}},
			"ddp-train " + ddp.Version + " (github.com/goddp/ddp, source tree, git abc123 2026-11-24T22:00:00Z, modified, " +
				"go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: main,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}},
			"ddp-train v1.2.3 (github.com/goddp/ddp, vcs abc123, go1.26.8)"},
	} {
		if got := versionLine(c.info); got != c.want {
			t.Errorf("versionLine: %q\nwant        %q", got, c.want)
		}
	}
}
