//go:build !race

package main

// raceBuild: the race detector is on (race_on_test.go).
const raceBuild = false
