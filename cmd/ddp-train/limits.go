package main

// Limits on every number and address the flags give (Note [limits]).
//
// Note [limits]: a value no run can use (NaN, an infinity, a bucket that
// overflows int in bytes, a port past 65535, more workers than the
// machine can hold) is refused by parseFlags, so ddp-train exits 2 with
// one line before its launcher starts any worker: never a worker that
// fails on it (exit 1, "worker rank 1 failed"), nor a machine that runs
// out of memory or processes. The workers parse the same flags and agree.
// The bounds:
//
//   - --nproc: at most nprocPerCPU per CPU (runtime.NumCPU) unless
//     --oversubscribe, and never more than maxNproc. Each worker is a
//     process with its own copy of the data and the model, and on one
//     machine the tcp backend's full mesh holds n(n-1) sockets, about a
//     million at 1024; larger jobs run one ddp-train per machine under
//     torchrun, srun or mpirun. The world size such launchers give is
//     bounded by pg.MaxWorldSize (pg/env).
//   - --lr: finite (the sign is config.validate's).
//   - --bucket-cap-mb, --first-bucket-mb: finite, at least one byte, at
//     most maxBucketMiB (1 TiB).
//   - --timeout: at least minTimeout (a second: it bounds the rendezvous
//     and every collective, so 1ns fails every run, as a "failed run" that
//     exits 1 and is retried), at most maxTimeout (a week; timeouts are
//     added to and scaled, and near 292 years overflow time.Duration).
//   - --steps: at most maxSteps, the most a checkpoint's nine-digit
//     directory name (step-NNNNNNNNN) holds; --epochs and --grad-accum at
//     most maxEpochs and maxGradAccum, so that epochs·batches and
//     steps·accumulation stay far from overflowing int.
//   - --samples: the synthetic set within dataset.MaxValues values.
//   - --classes: not negative (0 is the largest label plus one).
//   - --metrics-addr, --listen-addr: host:port with a numeric port; the
//     host, if any, an IP address or a host name; every worker's metrics
//     port (port+rank) at most 65535.
//
// Sizes that depend on the data (hidden layers, the batch, the classes
// of a data set) are the model's to check (model.Spec.Validate), which
// the launcher does before it starts the workers too.

import (
	"flag"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/dataset"
)

// The limits of Note [limits].
const (
	nprocPerCPU  = 8       // --nproc per CPU without --oversubscribe
	maxNproc     = 1024    // --nproc, even with --oversubscribe
	maxBucketMiB = 1 << 20 // --bucket-cap-mb and --first-bucket-mb: 1 TiB
	minTimeout   = time.Second
	maxTimeout   = 7 * 24 * time.Hour
	maxSteps     = 999_999_999
	maxEpochs    = 1 << 30
	maxGradAccum = 1 << 16
	maxPort      = 65535
)

// limits holds --oversubscribe.
type limits struct {
	oversubscribe bool
}

func (l *limits) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.oversubscribe, "oversubscribe", false, "allow --nproc beyond 8 per CPU (up to 1024)")
}

// validateLimits checks c against Note [limits] on this machine.
func validateLimits(c config) error { return c.checkLimits(runtime.NumCPU()) }

// checkLimits checks c against Note [limits] on a machine of cpus CPUs.
func (c config) checkLimits(cpus int) error {
	for _, err := range []error{
		c.checkNproc(cpus),
		checkFinite("--lr", c.lr),
		checkMiB("--bucket-cap-mb", c.bucketCapMB),
		checkMiB("--first-bucket-mb", c.firstBucketMB),
		c.checkCounts(),
		checkAddr("--metrics-addr", c.metricsAddr, c.metricsPorts()),
		checkAddr("--listen-addr", c.listenAddr, 0),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNproc bounds --nproc on a machine of cpus CPUs; mpirun's -np
// decides the ranks under --backend mpi.
func (c config) checkNproc(cpus int) error {
	perCPU := nprocPerCPU * max(cpus, 1)
	switch {
	case c.backend == "mpi":
	case c.nproc > maxNproc:
		return usagef("--nproc %d: more than %d, the most ddp-train runs on one machine; for a larger job run one "+
			"ddp-train per machine under torchrun, srun or mpirun", c.nproc, maxNproc)
	case c.nproc > perCPU && !c.oversubscribe:
		return usagef("--nproc %d: more than %d per CPU (%d on this machine's %d CPUs); use fewer, or add --oversubscribe "+
			"to allow up to %d", c.nproc, nprocPerCPU, perCPU, cpus, maxNproc)
	}
	return nil
}

// checkFinite refuses NaN and the infinities.
func checkFinite(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return usagef("%s %g: want a finite number", name, v)
	}
	return nil
}

// checkMiB checks a size in MiB: from one byte to maxBucketMiB.
func checkMiB(name string, mib float64) error {
	if math.IsNaN(mib) || mib*(1<<20) < 1 || mib > maxBucketMiB {
		return usagef("%s %g: want a size in MiB from 1 byte (%.3g) to %d (1 TiB)", name, mib, 1.0/(1<<20), maxBucketMiB)
	}
	return nil
}

// checkCounts bounds the counts and durations of Note [limits].
func (c config) checkCounts() error {
	maxSamples := dataset.MaxValues / dataset.SyntheticD
	switch {
	case c.timeout > maxTimeout:
		return usagef("--timeout %v: want at most %v (a week), and at least %v", c.timeout, maxTimeout, minTimeout)
	case c.steps > maxSteps:
		return usagef("--steps %d: want at most %d", c.steps, maxSteps)
	case c.epochs > maxEpochs:
		return usagef("--epochs %d: want at most %d", c.epochs, maxEpochs)
	case c.gradAccum > maxGradAccum:
		return usagef("--grad-accum %d: want at most %d", c.gradAccum, maxGradAccum)
	case c.samples > maxSamples:
		return usagef("--samples %d: want at most %d (%d features each, %d values in all)", c.samples, maxSamples,
			dataset.SyntheticD, dataset.MaxValues)
	case c.classes < 0:
		return usagef("--classes %d: want 0 (the largest label plus one) or a positive number", c.classes)
	}
	return nil
}

// metricsPorts is how many consecutive ports --metrics-addr takes: one
// per worker this ddp-train starts, one for a local job (or a worker
// started by another launcher, which knows its rank only later).
func (c config) metricsPorts() int {
	if c.backend == "tcp" || c.backend == "nccl" {
		return c.nproc
	}
	return 1
}

// checkAddr checks a host:port flag. ports > 0 is how many consecutive
// ports from port on the address takes (port 0, any free port, then only
// for one); ports == 0 means a listen address, where port 0 is fine.
func checkAddr(name, addr string, ports int) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s %q: want host:port, such as 127.0.0.1:9400 or :9400", name, addr)
	}
	p, err := strconv.Atoi(port)
	switch {
	case err != nil || p < 0 || p > maxPort:
		return usagef("%s %q: the port must be a number from 0 to %d", name, addr, maxPort)
	case host != "" && !isHost(host):
		return usagef("%s %q: %q is neither an IP address nor a host name", name, addr, host)
	case ports > 1 && p == 0:
		return usagef("%s %q: worker i serves on port+i, so give a port from 1 to %d", name, addr, maxPort-ports+1)
	case p+ports-1 > maxPort:
		return usagef("%s %q: its %d workers would serve on ports %d to %d; give a port of at most %d", name, addr, ports, p,
			p+ports-1, maxPort-ports+1)
	}
	return nil
}

// isHost reports whether s is an IP address or a well-formed host name
// (RFC 1123 labels; underscores allowed, as resolvers do).
func isHost(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
