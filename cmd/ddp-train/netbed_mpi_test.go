//go:build mpi

package main

import (
	"strings"
	"testing"
)

// TestNetbedMpirunMPI: mpirun starts two ranks on each of two hosts
// (node1's through the rsh agent) and ddp-train trains with --backend
// mpi: Open MPI's own transports (shared memory within a host, TCP
// between them) carry the collectives.
func TestNetbedMpirunMPI(t *testing.T) {
	netbedOrSkip(t)
	b := newNetbed(t, 2)
	log := launchTwice(t, layout{world: 4, launch: func(run int, train []string) string {
		return mpirunOnBed(t, b, append(train, "--backend", "mpi"))
	}})
	if n := strings.Count(log, `"msg":"mpi process group","rank":`); n != 4 {
		t.Fatalf("%d ranks joined an MPI process group, want 4:\n%s", n, log)
	}
}
