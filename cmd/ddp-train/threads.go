package main

import (
	"runtime"
	"strconv"

	"go.uber.org/zap"
)

// workerThreads is the launcher's thread policy, torchrun's rule for
// OMP_NUM_THREADS (torch/distributed/run.py: 1 per worker when
// --nproc_per_node > 1 and the user did not set it) carried over to Go's
// scheduler: n > 1 local workers that each default to GOMAXPROCS = every
// core oversubscribe the machine n times over, and one rank's Go
// threads then preempt the other's in the middle of a step. So, when the
// user did not set GOMAXPROCS, each worker gets GOMAXPROCS = cores / n
// (at least 1), cores being the launcher's own default GOMAXPROCS (the
// CPUs it may run on, within its cgroup's CPU limit). It returns the
// entries to add to the workers' environment, nil when there is nothing
// to set, and says so once in the log, as torchrun does.
func workerThreads(lookup func(string) (string, bool), n int, log *zap.Logger) []string {
	if _, set := lookup("GOMAXPROCS"); set || n <= 1 {
		return nil
	}
	cores := runtime.GOMAXPROCS(0)
	k := max(cores/n, 1)
	if log != nil {
		log.Info("setting GOMAXPROCS for each worker, to avoid oversubscribing the machine; set GOMAXPROCS to choose "+
			"otherwise", zap.Int("gomaxprocs", k), zap.Int("cores", cores), zap.Int("local_workers", n))
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(k)}
}
