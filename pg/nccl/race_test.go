//go:build race

package nccl

func init() { raceEnabled = true }
