// Package pgtest is the conformance suite that every pg.ProcessGroup
// backend runs in one line, as gonum's testblas is for BLAS
// implementations:
//
//	func world(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
//		groups, err := local.New(n, local.Options{Timeout: timeout})
//		if err != nil {
//			t.Fatal(err)
//		}
//		...
//	}
//
//	func TestConformance(t *testing.T) { pgtest.Run(t, world) }
//
// [Run] checks every collective on worlds of 1 to 8 ranks: every dtype
// with every op (and the invalid combinations), Broadcast from every root,
// lengths from 0 to 64 MiB, 16 collectives in flight at once, and the
// failures a backend must report rather than hang on: a rank that closes
// or aborts mid-collective, a rank that never arrives, and a monitored
// barrier that a rank misses. It then checks every collective of
// pg.Extended the same way (Reduce, Gather and Scatter from every root,
// AllToAll with uneven and empty splits, tagged Send and Recv, the
// coalesced collectives, Work.Seq, completion hooks, NewGroup and Split
// with subgroups in flight beside their parent, 16 MiB cases, 32 mixed
// collectives in flight) and their failures: a rank that leaves a
// subgroup, a sender that dies under a Recv, invalid arguments.
// [RunMisuse], part of Run, makes bad calls (a nil ctx, tensors without
// a dtype or the data a collective needs, every call after Close), each
// in a goroutine of its own and bounded in time: each must fail with an
// error, never panic or hang, and leave the group working. Wrappers of a
// backend (pg/desync, pg/instrument) run RunMisuse alone. The suite only
// calls the pg interfaces, so it runs as well over sockets as over
// shared memory.
//
// Backends that hold one rank per process, as MPI launches them, run
// [RunRank] instead, on every rank of the job: each rank makes every
// rank's inputs from the same seeds, checks its own output against the
// references below, and compares digests of its AllReduce results with
// the other ranks' through the group; [RunRankFault] runs the fault cases
// that such a job survives long enough to check (a rank that stays away:
// the others time out), one job per case.
//
// Results are judged against [Reduce], [Gather], [Scatter] and
// [AllToAll], serial references that share no code with the backends:
// integers bit for bit, floats within [Tolerance] (see [Compare]); and
// every rank's AllReduce result must be bit for bit the same as every
// other rank's.
package pgtest
