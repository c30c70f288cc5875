package main

// Note [memory follows the work]: a run's memory is the data set, the
// model and the Go runtime, in every process, and a run that needs more
// than the process may use dies of it, late (the Go runtime's "fatal
// error: out of memory", or the kernel's OOM killer) and after minutes
// of loading. So:
//
//   - the launcher does not hold the data set: it checks the input with
//     dataset.Inspect (Note [inspect, then load]) and leaves the loading
//     to the workers, which hold IDX pixels at a byte each (Note [compact
//     samples]);
//   - before anything of the run's size is allocated (the synthetic set
//     is generated, a worker is started), estimateMemory adds up what one
//     process will hold, and checkMemory compares it with every limit
//     that is known: RLIMIT_AS (ulimit -v) of each process, against its
//     address space; the memory.max of the cgroup (v2) the processes share,
//     against what it leaves; and the machine's memory and swap. A run
//     over one is refused, exit 2, with one line naming the estimate and
//     the limit. The estimate, logged as "memory estimate" (--log-level
//     debug), is within a factor of two of the peak RSS of real runs (0.83
//     to 1.03 on three MLPs after 10 steps: TestMemoryEstimateIsHonest;
//     the race detector's shadow memory doubles the peak); the activations
//     of a CNN on large images are not counted. It errs high for large
//     models (4 tcp workers of an 8.5M-parameter float64 MLP with Adam and
//     --zero: 544 MB estimated per process, about 320 MB measured), so a
//     cgroup v2 limit within that margin refuses a run that would fit.
//
// Note [the broadcast's copy]: ddp.Wrap broadcasts the parameters from
// rank 0 through one flat copy of them (reducer.BroadcastParams), garbage
// once it returns. Left to the collector, it is swept only when the heap
// reaches its goal (GOGC=100: twice the live heap, the parameters and
// that copy), which the gradients and the optimizer state of the first
// step reach: the heap's peak is then the goal whatever the optimizer
// keeps, and --zero's smaller state left the copy's pages idle but
// resident instead of lowering the peak (2 ranks, Adam, --hidden
// 2048,2048,2048: a worker's RssAnon 135 MiB with and without --zero).
// build collects it right after Wrap, so the gradients and the state
// reuse its pages: 135 and 103 MiB (docs/optimizers.md, "Memory").

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/model"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// memEstimate is what one process of a run is expected to hold, in bytes.
type memEstimate struct {
	data    int64 // the samples and labels, at the peak of loading them
	model   int64 // parameters, gradients, buckets, optimizer state and activations of its replicas
	runtime int64 // the Go runtime, the program and the libraries: this process's RSS now
	procs   int   // processes of the run on this machine
}

func (m memEstimate) perProcess() int64 { return m.data + m.model + m.runtime }

// modelCopies is how many values of the model's size a replica holds
// besides the optimizer's state, at the peak of a long run: the
// parameters, their gradients (Gorgonia's dual values), the reducer's
// buckets, Gorgonia's temporaries and the garbage the collector lets a
// step leave (GOGC). Measured on an MLP of 2.4M parameters with Adam,
// since Wrap's broadcast copy is collected (Note [the broadcast's copy]):
// a peak RSS of 97 MB after 10 steps, about 40 MB of it the runtime's, so
// about 4 copies besides Adam's 2; 6 leave room for larger temporaries
// (it was 11 before that collection).
const modelCopies = 6

// addressSlack is the address space a process maps beyond its size at
// the check and its data and model: the threads it has yet to start, each
// with its stack and the C library's 64 MiB malloc arena. Measured: under
// ulimit -v 1500000 ddp-train sometimes fails to start a thread, under
// 2000000 never, and by its first line it maps about 1.4 and 1.6 GiB
// there (the Go runtime reserves less where the limit is lower); without
// a limit a worker maps about 2.1 GiB, its RSS being 40 MiB.
const addressSlack = 256 << 20

// checkAddressSpace refuses, first thing, an RLIMIT_AS (ulimit -v) that
// leaves this process less than addressSlack beyond what it maps already:
// the threads the Go runtime starts next would fail to get their stacks
// and malloc arenas, and it would die with exit status 2 and its stacks
// (Note [a crash is not bad input]).
func checkAddressSpace() error {
	l := readLimits()
	if need := l.vmSize + addressSlack; l.as > 0 && need > l.as {
		return usagef("RLIMIT_AS (ulimit -v) allows each process %s of address space, and ddp-train needs at least %s to "+
			"start its threads; raise the limit (ulimit -v unlimited)", bytesText(l.as), bytesText(need))
	}
	return nil
}

// optimizerState is how many values per parameter an optimizer keeps.
func optimizerState(name string) int64 {
	switch name {
	case "momentum":
		return 1
	case "adam", "adamw":
		return 2
	}
	return 0
}

// estimateMemory estimates one process's memory for a run on info with
// spec, replicas replicas in the process and procs processes.
func estimateMemory(c config, info dataset.Info, spec model.Spec, replicas, procs int) memEstimate {
	n := int64(info.N)
	data := info.Bytes + 8*n // Y is []int
	if c.data != "" && info.Bytes == 8*n*int64(info.D) {
		data += info.Bytes // a .npy file's raw data, until it is converted
	}
	size := int64(spec.Dtype.Size())
	params := spec.NumParams()
	width := int64(info.D + spec.Classes)
	for _, h := range spec.Hidden {
		width += int64(h)
	}
	activations := 4 * int64(spec.Batch) * width * 8
	state := params * size * optimizerState(c.optimizer)
	if c.zero { // each rank its share; ranks on this machine <= the world, so never less than the real share
		state = (state + int64(replicas*procs) - 1) / int64(max(replicas*procs, 1))
	}
	perReplica := params*size*modelCopies + state + activations
	return memEstimate{data: data, model: int64(replicas) * perReplica, runtime: selfStatus("VmRSS"), procs: procs}
}

// checkMemory refuses, with one line, a run whose estimate exceeds a
// limit that is known (Note [memory follows the work]), and logs the
// estimate.
func checkMemory(m memEstimate, logger *zap.Logger) error {
	logger.Debug("memory estimate", zap.Int64("per_process_bytes", m.perProcess()), zap.Int64("data_bytes", m.data),
		zap.Int64("model_bytes", m.model), zap.Int64("runtime_bytes", m.runtime), zap.Int("processes", m.procs))
	return m.check(readLimits())
}

// memLimits are the limits on a run's memory that are known; 0 (or
// cgroup "") where one is not.
type memLimits struct {
	as         int64  // RLIMIT_AS, per process
	vmSize     int64  // this process's address space now
	cgroup     string // the memory.max file of the cgroup
	cgroupLeft int64  // what it leaves: memory.max less memory.current
	machine    int64  // memory and swap
}

// readLimits reads the limits of this process.
func readLimits() memLimits {
	l := memLimits{vmSize: selfStatus("VmSize"), machine: meminfo("MemTotal") + meminfo("SwapTotal")}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &lim); err == nil && lim.Cur != unix.RLIM_INFINITY && lim.Cur < 1<<62 {
		l.as = int64(lim.Cur)
	}
	l.cgroup, l.cgroupLeft, _ = cgroupLeft()
	return l
}

// check compares m with the limits l.
func (m memEstimate) check(l memLimits) error {
	what := fmt.Sprintf("about %s per process (data %s, model %s, runtime %s)", bytesText(m.perProcess()),
		bytesText(m.data), bytesText(m.model), bytesText(m.runtime))
	all := m.perProcess() * int64(m.procs)
	if m.procs > 1 {
		what = fmt.Sprintf("about %s: %d processes of %s", bytesText(all), m.procs, what[len("about "):])
	}
	if need := l.vmSize + m.data + m.model + addressSlack; l.as > 0 && need > l.as {
		return usagef("the run needs %s, and its address space %s, more than the %s that RLIMIT_AS (ulimit -v) allows each "+
			"process; use a smaller data set (--samples) or model, or raise the limit", what, bytesText(need), bytesText(l.as))
	}
	if l.cgroup != "" && all > l.cgroupLeft {
		return usagef("the run needs %s, more than the %s its cgroup's memory.max leaves (%s); use a smaller data set "+
			"(--samples), model or --nproc, or raise the limit", what, bytesText(l.cgroupLeft), l.cgroup)
	}
	if l.machine > 0 && all > l.machine {
		return usagef("the run needs %s, more than the %s of memory and swap this machine has; use a smaller data set "+
			"(--samples), model or --nproc", what, bytesText(l.machine))
	}
	return nil
}

// cgroupLeft returns the memory.max file of this process's cgroup (v2)
// and what it leaves (memory.max less memory.current); ok is false when
// there is no limit or it cannot be read.
func cgroupLeft() (path string, left int64, ok bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rel, found := strings.CutPrefix(line, "0::")
		if !found {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", rel)
		limit, err1 := readInt(filepath.Join(dir, "memory.max"))
		used, err2 := readInt(filepath.Join(dir, "memory.current"))
		if err1 != nil || err2 != nil {
			return "", 0, false
		}
		return filepath.Join(dir, "memory.max"), max(limit-used, 0), true
	}
	return "", 0, false
}

// readInt reads a file that holds one integer ("max" is an error).
func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}

// selfStatus is a "kB" field of /proc/self/status (VmRSS, VmSize, VmHWM)
// in bytes, or 0.
func selfStatus(field string) int64 { return kBField("/proc/self/status", field) }

// meminfo is a field of /proc/meminfo in bytes, or 0.
func meminfo(field string) int64 { return kBField("/proc/meminfo", field) }

// kBField reads "field: N kB" from a /proc file.
func kBField(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// bytesText is n in binary units: "17.0 GiB".
func bytesText(n int64) string {
	const unit = 1 << 10
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, k := float64(n), 0
	for v >= unit && k < 4 {
		v /= unit
		k++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[k-1])
}

// dataInfo is what the run's data set is, without loading it: the
// synthetic set's size, or the files' (dataset.Inspect, which checks them
// too).
func dataInfo(c config) (dataset.Info, error) {
	if c.data == "" {
		n := max(c.samples, 0)
		return dataset.Info{N: n, D: dataset.SyntheticD, Classes: dataset.SyntheticClasses, Shape: []int{dataset.SyntheticD},
			Bytes: int64(n) * dataset.SyntheticD * 8}, nil
	}
	return dataset.Inspect(c.data, c.labels, c.classes)
}

// loadChecked loads the run's data set, checking the memory first
// (before the synthetic set is generated; a file's data is held at the
// size it has once read). replicas is the model's replicas in this
// process, procs the processes of the run on this machine.
func loadChecked(c config, replicas, procs int, logger *zap.Logger) (*dataset.Dataset, error) {
	if c.data == "" {
		info, _ := dataInfo(c)
		if err := checkMemorySpec(c, info, replicas, procs, logger); err != nil {
			return nil, err
		}
		return loadData(c)
	}
	ds, err := loadData(c)
	if err != nil {
		return nil, err
	}
	return ds, checkMemorySpec(c, ds.Info(), replicas, procs, logger)
}

// checkMemorySpec is checkMemory for a run on info, once the model's spec
// is valid (an invalid one is checkInit's to report).
func checkMemorySpec(c config, info dataset.Info, replicas, procs int, logger *zap.Logger) error {
	spec := specFor(c, info)
	if spec.Validate() != nil {
		return nil
	}
	return checkMemory(estimateMemory(c, info, spec, replicas, procs), logger)
}
