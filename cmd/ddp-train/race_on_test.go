//go:build race

package main

// raceBuild: the race detector is on, and its shadow memory about
// triples the RSS of what a process allocates.
const raceBuild = true
