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
//     server until their keys are set. Idle or unauthenticated connections
//     cannot delay a rendezvous: a handshake has HandshakeTimeout (3 s),
//     connections in it are capped overall and per host, and over a cap
//     the oldest one that has sent nothing is closed (Note [admission]);
//     refusals are logged once and then summarised every WarnInterval
//     (Note [rate-limited refusals]). A request is read as its bytes
//     arrive, never at the size its header claims, against a server-wide
//     budget, MaxInflight (Note [frame budget]); Server.Stats reports it.
//   - FileStore: a file that the processes of one machine append to under
//     flock(2), in c10d's record format.
//   - HashStore: in memory, for ranks that share a process.
//   - PrefixStore: a namespace ("prefix/key") over another store.
//   - C10dClient (DialC10d): a client of PyTorch's own c10d TCPStore
//     server, such as the one torchrun's agent serves at
//     MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True). It
//     speaks c10d's wire protocol in both generations: 1.x (PyTorch 1.13)
//     and 2.x, which opens every connection with a VALIDATE query and a
//     magic number and numbers its queries one higher. DialC10d detects
//     which: it opens with 2.x's VALIDATE and two GETNUMKEYS and a CHECK;
//     a 2.x server answers, a 1.x server reads the bytes as a SET whose
//     key length has its top bit set and drops the connection without
//     storing anything (C10dOptions.Protocol skips the detection). Keys
//     go on the wire with a leading "/", as torch's client sends them, so
//     both see the same keys. Answers are decoded field by field with a
//     cap on value sizes; a connection that fails or whose ctx ends is
//     closed, which also withdraws a parked wait. The c10d protocol has no
//     authentication: it carries addresses, never the job's secret.
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
