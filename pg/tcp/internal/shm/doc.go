// Package shm is pg/tcp's shared-memory transport: the ranks of a group
// that share a Linux host move collectives' data through each other's
// memory instead of their TCP connections.
//
// Setup makes each rank's segment (an anonymous memfd: a header page of
// progress counters and per-slot metadata, then two 4 MiB data slots),
// hands it only to peers that pass the job's HMAC handshake on an
// abstract Unix socket, maps the peers', and agrees through the store on
// which ranks of each host share memory (a World) and how the group lies
// over hosts (a Layout). A World's collectives (AllReduce, Broadcast,
// AllGather, ReduceScatter, Reduce, Gather, Scatter, AllToAll, and the
// two shared-memory steps of the hierarchical AllReduce) cut their
// tensors into chunks of a slot, publish progress in the counters, wait
// on them with a short spin and then futex sleeps, and read and reduce
// straight from the peers' slots. Every chunk carries its Call, which
// every rank compares with its peers', so ranks that disagree fail with
// pg.ErrMismatch naming the peer; nothing read from a peer's segment is
// used as an offset or a length unless checked to lie in its mapping.
//
// Each segment ends in an arena from which World.Alloc hands out buffers
// (pg/tcp's NewHostBuffer, where the reducer keeps its buckets). An
// AllReduce whose tensors lie in every rank's arena skips the slots: the
// ranks reduce straight from each other's tensors into each other's
// tensors, as ranks in one process do (Note [buffers peers read in
// place]).
//
// The group supplies, through Run, what a wait checks between sleeps
// (its deadline, the caller's ctx, its failure, the peer's connection)
// and the errors it reports:
//
//	w, layout, err := shm.Setup(ctx, st, shm.Config{Rank: r, Size: n, Secret: secret, ...})
//	if w != nil && w.Full() {
//		err = w.AllReduce(run, t, pg.Op(pg.Sum))
//	}
//	defer w.Close()
//
// Shared memory is Linux-only (Supported); elsewhere Setup returns no
// World and pg/tcp uses TCP alone.
package shm
