// Package ft is the first part of fault-tolerant training after
// meta-pytorch/torchft (issue 40): the quorum service. Replica groups
// heartbeat to a Lighthouse and ask it, every step, for the next quorum:
// the set of replica groups that will take that step together. The
// Lighthouse decides with torchft's rules (docs/fault-tolerance.md):
//
//   - a replica is healthy while its last heartbeat (or quorum request)
//     is younger than HeartbeatTimeout;
//   - the fast path: when a previous quorum exists and every member of it
//     is healthy and asking again, the quorum is formed at once, with
//     every healthy participant (only the previous members when one of
//     them asks with ShrinkOnly);
//   - otherwise a quorum needs at least MinReplicas healthy participants
//     and more than half of the healthy replicas (no split brain), and
//     waits up to JoinTimeout (from the first participant's request) for
//     healthy replicas that have not asked yet;
//   - the quorum id grows by one when the members (their replica ids)
//     change, or when a member reports commit failures;
//   - Quorum.Results computes, for one member, what torchft's manager
//     computes from a quorum: its rank, the max step, whether it must heal
//     and from which up-to-date peer (round robin), and whom it serves.
//
// Lighthouse is the state machine alone, with an injected clock; Server
// serves it over HTTP with JSON bodies, every request signed with the
// job's secret (GODDP_SECRET); Client is a replica's side, retrying with
// backoff within its context, so a restarted Server (which forgets
// everything) is re-registered with. `ddp-train lighthouse` runs a Server.
//
// Manager is one replica's side (Note [the step as a transaction]): at
// every Start it asks the lighthouse for the step's quorum, rebuilds the
// process group across the members when the quorum changed (Connect;
// TCPConnector makes pg/tcp groups on the primary's store), and starts a
// live recovery from a peer when the replica is behind (Note [live
// recovery]); AllReduce (or Hook, for a reducer) averages over the step's
// participants; Commit votes, and the caller applies the update only when
// the step committed.
package ft
