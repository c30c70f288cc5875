// Package store is goddp's rendezvous key-value store, after c10d's Store:
// ranks publish addresses and counters in it and wait for each other's.
//
// Implementations:
//
//   - TCPStore (Server and Client): rank 0 hosts the server, as c10d's
//     is_master, and every rank, rank 0 included, talks to it over TCP.
//     Every connection first proves it holds the job's shared secret
//     (wire's HMAC handshake); frames have a length cap and requests are
//     decoded field by field, never reflectively. Get and Wait park on the
//     server until their keys are set.
//   - FileStore: a file that the processes of one machine append to under
//     flock(2), in c10d's record format.
//   - HashStore: in memory, for ranks that share a process.
//   - PrefixStore: a namespace ("prefix/key") over another store.
//
// Semantics follow c10d: Add keeps decimal text, so Get on a counter
// returns e.g. "3"; CompareSet sets only if the current value equals
// expected (an absent key matches an empty expected); Get and Wait block
// until their keys exist. Every blocking call is bounded by ctx, or by the
// store's timeout (DefaultTimeout, 300 s, as c10d) when ctx has no
// deadline; a timeout is a *TimeoutError, which wraps pg.ErrTimeout and
// names the keys.
//
// Rank 0 hosts and uses the store; the others dial it:
//
//	st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
//		Addr:     cfg.StoreAddr(), // MASTER_ADDR:MASTER_PORT, from pg/env
//		IsServer: cfg.IsStoreHost(),
//		Secret:   cfg.Secret,
//	})
//	...
//	defer st.Close()
//	if err := st.Set(ctx, fmt.Sprintf("addr/%d", rank), myAddr); err != nil { ... }
//	peer, err := st.Get(ctx, "addr/0") // waits until rank 0 has set it
package store
