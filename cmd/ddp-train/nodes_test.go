package main

import (
	"strings"
	"testing"
)

// The flags of a job of several machines are checked before anything
// starts: exit 2 and one line naming what to fix.
func TestNodeFlagsRefused(t *testing.T) {
	const secret = "GODDP_SECRET=00112233445566778899aabbccddeeff"
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no master", []string{secret}, []string{"--nnodes", "2"}, "--nnodes 2 needs --master-addr"},
		{"node rank too high", []string{secret}, []string{"--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"},
			"--node-rank 2: want 0 to 1"},
		{"negative nodes", []string{secret}, []string{"--nnodes", "0"}, "--nnodes 0"},
		{"master on one machine", []string{secret}, []string{"--master-addr", "10.0.0.1"}, "add --nnodes N"},
		{"bad port", []string{secret}, []string{"--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "70000"},
			"--master-port 70000"},
		{"local backend", []string{secret}, []string{"--nnodes", "2", "--master-addr", "10.0.0.1", "--backend", "local"},
			"use --backend tcp or nccl"},
		{"restarts", []string{secret}, []string{"--nnodes", "2", "--master-addr", "10.0.0.1", "--max-restarts", "1"},
			"restarts this machine's workers only"},
		{"no secret", nil, []string{"--nnodes", "2", "--master-addr", "10.0.0.1"}, "export GODDP_SECRET"},
		{"no secret, a program", nil, []string{"--nnodes", "2", "--master-addr", "10.0.0.1", "true"}, "export GODDP_SECRET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := append(args("--steps", "1"), tc.args...)
			if tc.args[len(tc.args)-1] == "true" { // a program takes no training flags
				flags = tc.args
			}
			r := runWithEnv(t, cleanEnv(tc.env...), flags...)
			line := strings.TrimSuffix(r.stderr, "\n")
			if r.code != 2 || !strings.Contains(line, tc.want) || strings.Contains(line, "\n") {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line with %q", r.code, r.stderr, tc.want)
			}
		})
	}
}
