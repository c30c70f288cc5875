#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): vet everything, then
# run every test with the race detector, since nearly every package starts
# goroutines. Fuzz targets run their seed corpora as ordinary tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's PyTorch (python3-torch, 1.13) for the tests that run ddp-train
# under a real torchrun and talk to a real torch.distributed.TCPStore
# (cmd/ddp-train, pg/store); they skip, saying why, when it is missing.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: installing python3-torch for the torchrun and TCPStore tests" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >/dev/null || {
			apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >/dev/null
		} || echo "test.sh: could not install python3-torch; the torchrun and TCPStore tests will skip" >&2
	else
		echo "test.sh: /usr/bin/python3 has no torch and this is not a root shell with apt-get; the torchrun and TCPStore tests will skip (install python3-torch to run them)" >&2
	fi
fi

go vet ./...
go test -race -timeout 30m ./...
