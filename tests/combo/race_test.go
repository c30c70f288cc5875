//go:build race

package combo_test

func init() { raceEnabled = true }
