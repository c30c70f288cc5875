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
// barrier that a rank misses. The suite only calls the pg interfaces, so
// it runs as well over sockets as over shared memory.
//
// Results are judged against [Reduce], a serial reference that shares no
// code with the backends' kernels: integers bit for bit, floats within
// [Tolerance] (see [Compare]); and every rank's AllReduce result must be
// bit for bit the same as every other rank's.
package pgtest
