//go:build !amd64 && !arm64

package libnccl

// Passing ncclUniqueId by value is only written for amd64 and arm64.

func initRank(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int) Result {
	return InvalidUsage
}

func initRankConfig(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int, cfg *config) Result {
	return InvalidUsage
}
