#!/bin/sh
# tests/gpu/prepare-carry.sh - run HERE (the build machine), from the repo
# root, before tests/gpu/device-run.sh runs on a lent GPU machine.
#
# Builds everything (ddpc, the runtime, the CUDA plugin, test_gpu), copies
# what runs there into .carry/build (ddpc finds its prefix from its own
# path: bin, lib, share, include, and test_gpu; not the objects or the Check
# suite, which would double the size), and puts in .carry/deps the Debian
# packages of the shared libraries those programs need at run time and link
# time (for the jobs test_gpu builds with ddpc) that the GPU machine's image
# does not hold: OpenBLAS, libyaml, libdeflate. The device tool then
# carries `.carry` (about 30 MiB of its 64; ignored by git). Nothing here
# needs a GPU.
set -eu
cd "$(dirname "$0")/../.."
make -j"$(nproc)" all cuda-link-check
rm -rf .carry .deps
mkdir -p .carry/build/tests .carry/deps
cp -a build/bin build/lib build/share build/include .carry/build/
rm -f .carry/build/lib/libddprt_cuda.a      # jobs load the plugin (.so), test_gpu is linked
cp -a build/tests/test_gpu build/tests/cuda_link_check .carry/build/tests/
# apt-get download: the packages only, no install; names are Debian 12's
(cd .carry/deps && apt-get download libopenblas0-pthread libopenblas-pthread-dev libgfortran5 \
    libquadmath0 libyaml-0-2 libdeflate0 libdeflate-dev zlib1g zlib1g-dev)
ls -l .carry/deps
du -shc .carry/build .carry/deps
echo "prepare-carry: carry [\".carry\"] and run tests/gpu/device-run.sh there"
