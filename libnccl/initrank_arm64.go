package libnccl

import "unsafe"

// Under AAPCS64 a composite larger than 16 bytes is passed as a pointer to
// a copy the caller made: pass a pointer to a fresh copy of the id.

func initRank(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int) Result {
	cp := new(UniqueID)
	*cp = *id
	return call(fn, uintptr(unsafe.Pointer(comm)), uintptr(nranks), uintptr(unsafe.Pointer(cp)), uintptr(rank))
}

func initRankConfig(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int, cfg *config) Result {
	cp := new(UniqueID)
	*cp = *id
	return call(fn, uintptr(unsafe.Pointer(comm)), uintptr(nranks), uintptr(unsafe.Pointer(cp)), uintptr(rank),
		uintptr(unsafe.Pointer(cfg)))
}
