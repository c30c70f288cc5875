package libnccl

import "unsafe"

// See the package documentation: under the System V x86-64 ABI the
// 128-byte ncclUniqueId is passed in memory, so the integer arguments
// after it take the registers it skipped, and its sixteen words go on the
// stack after three padding registers.

func initRank(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int) Result {
	w := (*[16]uintptr)(unsafe.Pointer(id))
	return call(fn, uintptr(unsafe.Pointer(comm)), uintptr(nranks), uintptr(rank), 0, 0, 0,
		w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15])
}

func initRankConfig(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int, cfg *config) Result {
	w := (*[16]uintptr)(unsafe.Pointer(id))
	return call(fn, uintptr(unsafe.Pointer(comm)), uintptr(nranks), uintptr(rank), uintptr(unsafe.Pointer(cfg)), 0, 0,
		w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15])
}
