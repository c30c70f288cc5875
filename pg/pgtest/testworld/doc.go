// Package testworld starts in-process worlds of ranks for tests: n ranks
// of the local or the TCP backend, closed when the test ends, and helpers
// that run a function on every rank at once. It is shared by the tests of
// the root package (the Gorgonia wrapper) and of package reducer, which
// need the same worlds and cannot import each other's test files.
package testworld
