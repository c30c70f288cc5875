// Package nccltest runs pg/nccl Groups without a GPU, for the tests of
// code that drives an NCCL group (the reducer's device buckets, DDP on
// NCCL), as net/http/httptest serves HTTP without a network.
//
// The Groups are the real ones (issue path, staging, watchdog, flight
// recorder, point-to-point lanes, device buckets) over the binding's
// test double, as c10d's FakeProcessGroup: "device" memory is host
// memory behind opaque device pointers, each stream is a goroutine that
// runs its queue in order, and every NCCL call is carried out by a
// pg/local group of the same world, so data really moves between ranks.
// The double reports NCCL 2.28 with every optional symbol unless Options
// say otherwise, so device buckets are symmetric windows by default.
//
//	w, err := nccltest.NewWorld(n, nccltest.Options{})
//	defer w.Close()
//	g := w.Groups[rank] // a *pgnccl.Group
//	live, made := w.Registrations(rank)
package nccltest
