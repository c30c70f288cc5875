package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goddp/ddp/internal/netbed"
	"github.com/goddp/ddp/launch"
)

// bedJob runs jobs of 2 hosts × k ranks on a netbed, as a launcher does:
// each rank a process on its host with torchrun's variables.
type bedJob struct {
	b      *netbed.Bed
	hosts  int
	secret string
	port   int    // the next MASTER_PORT
	logDir string // each rank's stderr goes here
}

func newBedJob(ctx context.Context, hosts int, logDir string, logf func(string, ...any)) (*bedJob, error) {
	if err := netbed.Available(); err != nil {
		return nil, err
	}
	secret, err := launch.NewSecret()
	if err != nil {
		return nil, err
	}
	b, err := netbed.New(ctx, netbed.Options{Hosts: hosts, Logf: logf})
	if err != nil {
		return nil, err
	}
	return &bedJob{b: b, hosts: hosts, secret: secret, port: 29400, logDir: logDir}, nil
}

func (j *bedJob) Close() error { return j.b.Close() }

// setRate caps every host's link ("" uncaps).
func (j *bedJob) setRate(ctx context.Context, rate string) error {
	for i := range j.hosts {
		if err := j.b.SetRate(ctx, i, rate); err != nil {
			return err
		}
	}
	return nil
}

// launcherPrefixes are the variables a launcher sets; a rank's
// environment starts without any of them.
func launcherPrefixes() []string {
	return []string{"RANK=", "WORLD_SIZE=", "LOCAL_", "GROUP_RANK=", "ROLE_", "MASTER_", "TORCHELASTIC_",
		"OMPI_", "SLURM_", "PET_", "JOB_COMPLETION_INDEX=", "GODDP_"}
}

func (j *bedJob) env(rank, size, local, perHost, port int) []string {
	var out []string
	for _, kv := range osEnviron() {
		if !hasAnyPrefix(kv, launcherPrefixes()) {
			out = append(out, kv)
		}
	}
	return append(out, "RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(size),
		"LOCAL_RANK="+strconv.Itoa(local), "LOCAL_WORLD_SIZE="+strconv.Itoa(perHost),
		"MASTER_ADDR="+j.b.Hosts()[0].Addr, "MASTER_PORT="+strconv.Itoa(port), "GODDP_SECRET="+j.secret)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// run starts perHost ranks of argv on each host, waits for all of them
// (at most timeout), and returns each rank's stdout.
func (j *bedJob) run(ctx context.Context, perHost int, timeout time.Duration, name string, argv ...string) ([]string,
	error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	j.port++
	size := j.hosts * perHost
	outs := make([]bytes.Buffer, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cmd := j.b.Command(ctx, r/perHost, argv[0], argv[1:]...)
		cmd.Env = j.env(r, size, r%perHost, perHost, j.port)
		cmd.Stdout = &outs[r]
		f, err := os.Create(filepath.Join(j.logDir, fmt.Sprintf("%s.rank%d.log", name, r)))
		if err != nil {
			return nil, err
		}
		cmd.Stderr = f
		if err := cmd.Start(); err != nil {
			_ = f.Close()
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			errs[r] = cmd.Wait()
			_ = f.Close()
			if errs[r] != nil {
				cancel() // one rank failed: stop the others now
			}
		})
	}
	wg.Wait()
	res := make([]string, size)
	for r := range size {
		res[r] = outs[r].String()
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("%s: %w (logs in %s)", name, err, j.logDir)
	}
	return res, nil
}
