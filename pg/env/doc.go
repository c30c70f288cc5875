// Package env reads a rank's place in the job from the environment that
// launchers already set, for cmd/ programs. The library never reads the
// environment itself: a program passes os.LookupEnv, and tests pass a map.
//
//	cfg, err := env.FromLookup(os.LookupEnv)
//	if err != nil {
//		log.Fatal(err) // e.g. "RANK=3 is not below WORLD_SIZE=2"
//	}
//	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
//		Addr:       cfg.StoreAddr(),
//		ListenAddr: cfg.StoreListenAddr(),
//		IsServer:   cfg.IsStoreHost(),
//		Secret:     cfg.Secret,
//	})
//
// Recognised launchers. They nest (srun starts torchrun, which starts the
// workers; mpirun runs inside a Slurm allocation), so the innermost wins:
//
//   - torchrun and Kubernetes PyTorchJob: RANK and WORLD_SIZE, and
//     LOCAL_RANK and LOCAL_WORLD_SIZE (a PyTorchJob without torchrun
//     sets no LOCAL_ variables: one process per pod, LocalRank 0 of 1).
//     Under torchrun's agent (TORCHELASTIC_RUN_ID, GROUP_RANK and the
//     other TORCHELASTIC_ variables are set) also GroupRank, RunID,
//     RestartCount, MaxRestarts and UseAgentStore: the agent serves a
//     c10d store at MASTER_ADDR:MASTER_PORT, so no rank hosts one.
//   - mpirun (Open MPI): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE.
//   - Slurm's srun: SLURM_PROCID (rank), SLURM_NTASKS (world size),
//     SLURM_LOCALID (local rank), SLURM_NODEID (GroupRank) and
//     SLURM_STEP_TASKS_PER_NODE (local world size), in a task of a job
//     step (SLURM_STEP_ID is set) of more than one task. Unless set,
//     MASTER_ADDR is the first host of SLURM_STEP_NODELIST (else
//     SLURM_JOB_NODELIST), expanded by ExpandHostlist, and MASTER_PORT is
//     SlurmMasterPort(SLURM_JOB_ID) = 10000 + SLURM_JOB_ID % 20000, the
//     same in every task without talking. Concurrent steps of one job
//     that share their first node must set MASTER_PORT apart. A one-task
//     step, and the batch script or allocation shell of one task, are no
//     job of several ranks: the program is the whole job, as below.
//   - Kubeflow Trainer v2's Torch runtime (TrainJob) with the program as
//     the container's command, one process per pod: PET_NODE_RANK (rank
//     and GroupRank) of PET_NNODES, the store at PET_MASTER_ADDR and
//     PET_MASTER_PORT unless MASTER_ADDR and MASTER_PORT are set.
//     PET_NPROC_PER_NODE above 1 (or "auto") is refused: torchrun must be
//     the container's command then, and its RANK wins.
//   - an Indexed Job, or each Job of a JobSet: JOB_COMPLETION_INDEX is the
//     rank where the pod template sets WORLD_SIZE and no RANK.
//   - none of them: a single process, rank 0 of 1.
//
// No silent fallback. A launcher's environment cut short (RANK without
// WORLD_SIZE, MASTER_ADDR or LOCAL_RANK or a TORCHELASTIC_ variable
// without a rank, MASTER_PORT without MASTER_ADDR, SLURM_PROCID without
// SLURM_NTASKS or a task of srun without SLURM_LOCALID, the batch script
// of several tasks running the program instead of srun), and launchers
// that are peers but disagree (RANK and WORLD_SIZE set by hand that
// differ from Open MPI's or Slurm's), are errors that name the variable
// and what to do, never a job of one process. So is a world size (or a
// local one) above pg.MaxWorldSize, which a launcher never sets: it would
// otherwise be sized into memory before any peer is met.
//
// Under torchrun, Open MPI and hand-set variables the store is at
// MASTER_ADDR:MASTER_PORT (port 29500 when unset, as torch). MASTER_ADDR
// may be left out only by a single-rank job, which then uses 127.0.0.1.
//
// GODDP_SECRET holds the job's shared secret; jobs of more than one rank
// must set it. Surrounding white space is dropped. If what remains is
// hexadecimal (an even number of hex digits) that decodes to at least 16
// bytes, as launchers generate it (e.g. `openssl rand -hex 32`), the
// decoded bytes are the secret; otherwise the text itself is. Either way
// the secret must be at least 16 bytes. Every process applies the same
// rule, so they agree on the secret.
//
// Variables set to the empty string count as unset. Variables that come in
// pairs (RANK and WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and Open
// MPI's) must be set together.
package env
