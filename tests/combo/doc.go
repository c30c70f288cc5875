// Package combo is goddp's metamorphic suite (TestCombinations, after
// pebble's): every combination of the reducer's options, the comm hooks,
// the backends (pg/local, pg/tcp with and without shared memory), the
// world sizes, the dtypes and the per-rank graphs of the branch model
// (package testmodel), drawn from a seed, must train as a plain float64
// reference computed from Gorgonia's own gradients says, and keep the
// replicas bitwise equal where DDP promises it. The combinations DDP
// refuses by design must be refused with the documented error.
//
//	go test -count=1 ./tests/combo                                      # seeds 1..1500 (150 under -race)
//	go test -count=1 -run TestCombinations -combo.seed=417 -v ./tests/combo # replay one seed
//
// combo_test.go lists the other flags. The package holds tests only, so it
// has no Example.
package combo
