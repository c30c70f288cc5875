package main

import (
	"flag"
	"slices"
	"strings"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
)

// nodeFlags make ddp-train's own launcher one machine's share of a job
// of several, as torchrun's static rendezvous does: the same command on
// every machine but --node-rank, each starting --nproc workers with
// global ranks NODE_RANK*nproc+i (launch.Node). docs/multi-host.md.
type nodeFlags struct {
	nnodes     int    // --nnodes
	nodeRank   int    // --node-rank
	masterAddr string // --master-addr
	masterPort int    // --master-port
}

func (n *nodeFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&n.nnodes, "nnodes", 1, "machines in the job, each running ddp-train with the same flags but --node-rank "+
		"(torchrun's --nnodes with its static rendezvous); each starts --nproc workers; needs --master-addr and GODDP_SECRET")
	fs.IntVar(&n.nodeRank, "node-rank", 0, "with --nnodes: this machine's index, 0 to nnodes-1; its workers are ranks "+
		"node-rank*nproc to node-rank*nproc+nproc-1")
	fs.StringVar(&n.masterAddr, "master-addr", "", "with --nnodes: node 0's host name or address, which every machine "+
		"must reach; rank 0 serves the rendezvous store there")
	fs.IntVar(&n.masterPort, "master-port", 29500, "with --nnodes: the store's port on --master-addr")
}

// validate checks the flags of a job of several machines.
func (n nodeFlags) validate(c config) error {
	multi := n.nnodes > 1
	switch {
	case n.nnodes < 1 || n.nnodes > pg.MaxWorldSize:
		return usagef("--nnodes %d: want 1 to %d", n.nnodes, pg.MaxWorldSize)
	case n.nodeRank < 0 || n.nodeRank >= n.nnodes:
		return usagef("--node-rank %d: want 0 to %d (--nnodes %d)", n.nodeRank, n.nnodes-1, n.nnodes)
	case !multi && (slices.Contains(c.setFlags, "master-addr") || slices.Contains(c.setFlags, "master-port")):
		return usagef("--master-addr and --master-port place a job of several machines: add --nnodes N (and --node-rank) " +
			"on each, or leave them out on one machine")
	case multi && n.masterAddr == "":
		return usagef("--nnodes %d needs --master-addr: node 0's host name or address, reachable from every machine",
			n.nnodes)
	case n.masterPort < 1 || n.masterPort > 65535:
		return usagef("--master-port %d: want 1 to 65535", n.masterPort)
	case multi && c.nproc > pg.MaxWorldSize/n.nnodes:
		return usagef("--nnodes %d × --nproc %d is more than %d ranks", n.nnodes, c.nproc, pg.MaxWorldSize)
	case multi && c.backend != "tcp" && c.backend != "nccl":
		return usagef("--nnodes starts worker processes that meet through a TCP store: use --backend tcp or nccl "+
			"(--backend %s cannot span machines this way)", c.backend)
	case multi && c.maxRestarts > 0:
		return usagef("--max-restarts restarts this machine's workers only, and they cannot meet the other machines' " +
			"again; with --nnodes restart the whole job (or use torchrun --max_restarts)")
	}
	return nil
}

// node returns this machine's place in the job, or nil on one machine.
// Every machine must export the same GODDP_SECRET.
func (n nodeFlags) node(lookup func(string) (string, bool)) (*launch.Node, error) {
	if n.nnodes <= 1 {
		return nil, nil
	}
	secret, _ := lookup("GODDP_SECRET")
	if strings.TrimSpace(secret) == "" {
		return nil, usagef("--nnodes %d: export GODDP_SECRET on every machine, the same on all (e.g. export "+
			"GODDP_SECRET=$(openssl rand -hex 32))", n.nnodes)
	}
	return &launch.Node{Nodes: n.nnodes, Rank: n.nodeRank, MasterAddr: n.masterAddr, MasterPort: n.masterPort,
		Secret: secret}, nil
}
