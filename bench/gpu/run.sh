#!/bin/sh
# bench/gpu/run.sh - ddpc vs PyTorch on the GPU (bench/gpu/run.py says what).
# On a lent GPU machine: tests/gpu/README.md, then
#   sh tests/gpu/device-run.sh bench      (carry [".carry"])
set -eu
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
exec python3 bench/gpu/run.py "$@"
