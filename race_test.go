//go:build race

package ddp

func init() { raceEnabled = true }
