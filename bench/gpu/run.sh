#!/bin/sh
# bench/gpu/run.sh - ddpc vs PyTorch on the GPU (bench/gpu/run.py says what).
# On a lent GPU machine: tests/gpu/README.md, then
#   DDPC_TEST_PARTS=none DDPC_STAGE_BENCH_MODELS=mlp,cnn,gpt,gpt2 DDPC_STAGE_BENCH_S=500 \
#       sh tests/gpu/stage.sh             (carry [".carry"])
set -eu
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
exec python3 bench/gpu/run.py "$@"
