#!/bin/sh
# tests/gpu/device-run.sh - run THERE (a lent GPU machine), from the repo
# root, with `.carry` carried from tests/gpu/prepare-carry.sh (or, as
# before it existed, `build` and `.deps`):
#
#   sh tests/gpu/device-run.sh          -> test_gpu's exit status
#   sh tests/gpu/device-run.sh bench    -> bench/gpu/run.sh instead
#
# Unpacks the .debs into /tmp/ddpc-deps, points the loader (LD_LIBRARY_PATH)
# and the linker (LIBRARY_PATH, for the jobs test_gpu builds) at it; picks
# an NCCL >= 2.30 for world 2 and 4 on one GPU: .nccl/libnccl.so.2 if
# carried, else the image's nvidia-nccl-cu13 wheel, else the toolkit's
# (test_gpu then fails naming the version); then runs test_gpu
# with DDPC_REQUIRE_GPU=1, so a GPU it cannot test is a failure, not a SKIP.
# It runs the programs built on the build machine: no make here (the image
# lacks the -dev headers), so rebuild there first after any change.
set -eu
cd "$(dirname "$0")/../.."
B=build DEBS=.deps
if [ -d .carry/build ]; then
    B=.carry/build DEBS=.carry/deps
fi
test -x $B/tests/test_gpu && test -x $B/bin/ddpc && test -f $B/lib/ddpc/libddprt_cuda.so || {
    echo "device-run: $B is not complete: run tests/gpu/prepare-carry.sh on the build" \
         "machine and carry .carry"; exit 1; }
D=/tmp/ddpc-deps
L=$D/usr/lib/x86_64-linux-gnu
if [ -d $DEBS ]; then
    mkdir -p $D
    for f in $DEBS/*.deb; do dpkg -x "$f" $D; done
    LD_LIBRARY_PATH=$L:$L/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    LIBRARY_PATH=$L:$L/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH LIBRARY_PATH
fi
nccl=""
if [ -f .nccl/libnccl.so.2 ]; then
    nccl=$PWD/.nccl
else
    nccl=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' \
           2>/dev/null || true)
fi
if [ -n "$nccl" ] && [ -f "$nccl/libnccl.so.2" ]; then
    LD_LIBRARY_PATH=$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
    echo "device-run: NCCL from $nccl"
fi
nvidia-smi -L || true
export DDPC_BUILD=$PWD/$B DDPC_REQUIRE_GPU=1
if [ "${1:-}" = bench ]; then
    exec sh bench/gpu/run.sh
fi
exec $B/tests/test_gpu
