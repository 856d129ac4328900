#!/bin/sh
# tests/gpu/prepare-carry.sh - run HERE (the build machine), from the repo
# root, before tests/gpu/device-run.sh runs on a lent GPU machine.
#
# Builds everything (ddpc, the runtime, the CUDA plugin, test_gpu) and puts
# in .deps/ the Debian packages of the shared libraries those programs need
# at run time and link time (for the jobs test_gpu builds with ddpc) that
# the GPU machine's image does not hold: OpenBLAS, libyaml, libdeflate. The
# device tool then carries `build` and `.deps` (about 20 MiB; both ignored
# by git). Nothing here needs a GPU.
set -eu
cd "$(dirname "$0")/../.."
make -j"$(nproc)" all cuda-link-check
rm -rf .deps
mkdir -p .deps
# apt-get download: the packages only, no install; names are Debian 12's
(cd .deps && apt-get download libopenblas0-pthread libopenblas-pthread-dev libgfortran5 \
    libquadmath0 libyaml-0-2 libdeflate0 libdeflate-dev zlib1g zlib1g-dev)
ls -l .deps
du -sh build .deps
echo "prepare-carry: carry [\"build\", \".deps\"] and run tests/gpu/device-run.sh there"
