package main

import (
	"os"
	"testing"
)

// TestGenerated fails when gemm_amd64.s is not what this program writes:
// after an edit here, run go generate ./internal/gemm.
func TestGenerated(t *testing.T) {
	want, err := os.ReadFile("../gemm_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if generate() != string(want) {
		t.Fatal("internal/gemm/gemm_amd64.s is stale; run go generate ./internal/gemm")
	}
}
