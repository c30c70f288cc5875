package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/internal/netbed"
)

// TestNetbedFaultTolerantLinkDown: issue 40's link taken down. A
// lighthouse and replicas a and c on node0, replica b on node1, each
// started by hand (GODDP_FT_REPLICA_ID, --lighthouse). node1's link goes
// down for 3 s, past --ft-timeout and the heartbeat timeout: a and c
// discard the step in flight and go on without b; when the link is back b
// heals from them and rejoins (whether it discards a step depends on
// where the cut lands: in a collective, or in its quorum request). Every replica ends on one state, and the
// one-process replay of the run's record (followed along the commit chain)
// ends there too, bitwise.
func TestNetbedFaultTolerantLinkDown(t *testing.T) {
	netbed.SkipUnless(t, os.Getenv("GODDP_TEST_NETBED") == "1")
	bed := netbed.ForTest(t, true, netbed.Options{Hosts: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hosts := bed.Hosts()
	lh := hosts[0].Addr + ":29417"
	env := append(os.Environ(), "GODDP_SECRET="+testLighthouseSecret, "GORACE=atexit_sleep_ms=0")
	light := bed.Command(ctx, 0, self, "lighthouse", "--listen", lh, "--min-replicas", "1", "--join-timeout",
		"300ms", "--heartbeat-timeout", "1s")
	light.Env = env
	if err := light.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = light.Process.Kill(); _ = light.Wait() }()
	dir := t.TempDir()
	type replica struct {
		id   string
		host int
		cmd  *exec.Cmd
		log  *syncBuffer
	}
	rs := []*replica{{id: "a", host: 0}, {id: "b", host: 1}, {id: "c", host: 0}}
	for _, r := range rs {
		out := filepath.Join(dir, r.id)
		r.log = &syncBuffer{}
		r.cmd = bed.Command(ctx, r.host, self, args("--fault-tolerant", "--lighthouse", lh, "--listen-addr",
			hosts[r.host].Addr+":0", "--steps", "8000", "--ft-timeout", "2s", "--ft-ordered-sum", "--log-every", "25",
			"--ft-record", filepath.Join(out, "record-1.jsonl"), "--summary", filepath.Join(out, "summary.json"))...)
		r.cmd.Env = append(env, ftReplicaEnv+"="+r.id)
		r.cmd.Stderr = r.log
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	waitFTStep(t, rs[1].log, 100)
	if err := bed.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := bed.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	sums := make([]summary, len(rs))
	for i, r := range rs {
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("replica %s: %v\n%s", r.id, err, tail(r.log.String()))
		}
		sums[i] = readFTSummary(t, filepath.Join(dir, r.id, "summary.json"))
		if sums[i].StateDigest != sums[0].StateDigest || sums[i].CommitChain != sums[0].CommitChain {
			t.Errorf("replica %s ends at %s (chain %s), a at %s (chain %s):\n%s", r.id, sums[i].StateDigest,
				sums[i].CommitChain, sums[0].StateDigest, sums[0].CommitChain, tail(r.log.String()))
		}
	}
	if b := rs[1].log.String(); !strings.Contains(b, `"msg":"recovered","replica_id":"b","step":`) ||
		sums[1].CommittedSteps >= 8000 {
		t.Errorf("b committed %d steps itself: want it cut off and healed:\n%s", sums[1].CommittedSteps, tail(b))
	}
	lines, err := mergeRecords(dir, sums[0].CommitChain)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(filepath.Join(dir, "record.jsonl"), lines); err != nil {
		t.Fatal(err)
	}
	checkReplay(t, dir, sums[0], "8000")
}

// waitFTStep waits until log holds a train line at step n or later.
func waitFTStep(t *testing.T, log *syncBuffer, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, m := range ftTrainStepRE.FindAllStringSubmatch(log.String(), -1) {
			if s, _ := strconv.Atoi(m[1]); s >= n {
				return
			}
		}
	}
	t.Fatalf("no train line at step %d:\n%s", n, tail(log.String()))
}
