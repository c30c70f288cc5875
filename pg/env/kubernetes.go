package env

// Kubernetes launchers that run the program itself, one process per pod,
// without torchrun in the container:
//
// Kubeflow Trainer v2's Torch runtime (TrainJob) gives each node's pod
// torchrun's settings as PET_ variables, which torchrun reads when it is
// the container's command: PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
// PET_MASTER_ADDR and PET_MASTER_PORT. With one process per node the pod
// is one rank: PET_NODE_RANK of PET_NNODES. More processes per node need
// torchrun (or mpirun) to start them, which then set RANK and the rest.
//
// An Indexed Job (and so each Job of a JobSet) gives every pod
// JOB_COMPLETION_INDEX. With WORLD_SIZE set in the pod template, and RANK
// not, the completion index is the rank.

// kubeflow reads Trainer v2's PET_ variables: set reports whether they
// name this pod's node.
func (r reader) kubeflow() (c Config, set bool, err error) {
	node, nodes, set, err := r.pair("PET_NODE_RANK", "PET_NNODES")
	if err != nil || !set {
		return Config{}, false, err
	}
	per, perSet, err := r.int("PET_NPROC_PER_NODE")
	if err != nil {
		return Config{}, false, invalid("PET_NPROC_PER_NODE is not a number of processes; with \"auto\", \"gpu\" or " +
			"\"cpu\" run the program under torchrun in the container's command, which resolves it")
	}
	if perSet && per != 1 {
		return Config{}, false, invalid("PET_NPROC_PER_NODE=%d asks for %d processes in each pod, which a launcher starts: "+
			"make torchrun the container's command (it reads the PET_ variables and sets RANK for each), or set "+
			"numProcPerNode to 1", per, per)
	}
	return Config{Source: SourceKubeflow, Rank: node, WorldSize: nodes, GroupRank: node, LocalWorldSize: 1}, true, nil
}

// withIndexedJobRank makes JOB_COMPLETION_INDEX read as RANK where an
// Indexed Job's pod sets WORLD_SIZE but no RANK, and reports whether it
// did.
func (r reader) withIndexedJobRank() (reader, bool) {
	_, rank := r.str("RANK")
	_, size := r.str("WORLD_SIZE")
	_, index := r.str("JOB_COMPLETION_INDEX")
	if rank || !size || !index {
		return r, false
	}
	return reader{func(name string) (string, bool) {
		if name == "RANK" {
			name = "JOB_COMPLETION_INDEX"
		}
		return r.lookup(name)
	}}, true
}

// petMaster makes PET_MASTER_ADDR and PET_MASTER_PORT read as
// MASTER_ADDR and MASTER_PORT where those are unset.
func (r reader) petMaster() reader {
	return reader{func(name string) (string, bool) {
		if v, ok := r.str(name); ok || (name != "MASTER_ADDR" && name != "MASTER_PORT") {
			return v, ok
		}
		return r.lookup("PET_" + name)
	}}
}
