//go:build mpi

package mpi

// SharedWorld is the world group TestMain made, for the external examples.
func SharedWorld() *Group { return tw.g }
