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
// Recognised conventions, tried in this order:
//
//   - torchrun and Kubernetes PyTorchJob: RANK and WORLD_SIZE, and
//     LOCAL_RANK and LOCAL_WORLD_SIZE (a PyTorchJob without torchrun
//     sets no LOCAL_ variables: one process per pod, LocalRank 0 of 1).
//   - mpirun (Open MPI): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE.
//   - none of them: a single process, rank 0 of 1.
//
// Under every convention the store is at MASTER_ADDR:MASTER_PORT (port
// 29500 when unset, as torch). MASTER_ADDR may be left out only by a
// single-rank job, which then uses 127.0.0.1.
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
