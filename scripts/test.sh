#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): vet everything, then
# run every test with the race detector, since nearly every package starts
# goroutines. Fuzz targets run their seed corpora as ordinary tests.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -race -timeout 30m ./...
