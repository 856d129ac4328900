#!/bin/sh
# tests/gpu/prepare-carry.sh - run HERE (the build machine), from the repo
# root, before tests/gpu/stage.sh runs on a lent GPU machine.
#
# Builds everything (ddpc, the runtime, the CUDA plugin, test_gpu) and lays
# out .carry, which the device tool carries (ignored by git):
#   .carry/build  what runs there: bin, lib, share, include and test_gpu
#                 (ddpc finds its prefix from its own path); not the objects
#                 or the Check suite, which would double the size
#   .carry/root.tar.gz  the Debian packages the GPU machine's image may
#                 lack, unpacked here (dpkg -x) into one tree, so nothing
#                 there needs dpkg (tar and gzip unpack it): m4 (ddpc build
#                 runs it), OpenBLAS, libyaml, libdeflate and zlib, with
#                 their -dev link names for the jobs test_gpu and the bench
#                 build there. An absolute symlink inside the tree (zlib1g-
#                 dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) is
#                 made relative, or it would dangle there (and GNU ld would
#                 quietly take a libz.a instead); static archives, LAPACK and
#                 the reference BLAS are left out: nothing links them. The
#                 tree is 39 MiB, its tarball 12 MiB.
# and prints the size that travels (it must stay well under the 64 MiB a
# run may carry, tracked files included). Nothing here needs a GPU, and
# nothing fetched is built: the packages are Debian's binaries.
set -eu
cd "$(dirname "$0")/../.."
make -j"$(nproc)" all cuda-link-check
rm -rf .carry .deps
mkdir -p .carry/build/tests .carry/root .carry/debs
cp -a build/bin build/lib build/share build/include .carry/build/
rm -f .carry/build/lib/libddprt_cuda.a      # jobs load the plugin (.so), test_gpu is linked
cp -a build/tests/test_gpu build/tests/cuda_link_check .carry/build/tests/
# apt-get download: the packages only, no install; names are Debian 12's
(cd .carry/debs && apt-get download m4 libopenblas0-pthread libopenblas-pthread-dev \
    libgfortran5 libquadmath0 libyaml-0-2 libdeflate0 libdeflate-dev zlib1g zlib1g-dev)
for f in .carry/debs/*.deb; do
    dpkg -x "$f" .carry/root
done
rm -rf .carry/debs .carry/root/usr/share/doc .carry/root/usr/share/man .carry/root/usr/share/info \
    .carry/root/usr/share/lintian .carry/root/usr/share/locale
find .carry/root -name '*.a' -delete
rm -f .carry/root/usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack* \
    .carry/root/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas*
# absolute symlinks into the tree become relative ones
find .carry/root -type l | while read -r link; do
    target=$(readlink "$link")
    case $target in
    /*) if [ -e ".carry/root$target" ]; then
            ln -sfn "$(realpath --relative-to="$(dirname "$link")" ".carry/root$target")" "$link"
        else
            echo "prepare-carry: $link -> $target points outside the tree; removed"
            rm -f "$link"
        fi ;;
    esac
done
find .carry/root -xtype l -exec echo "prepare-carry: dangling link {}" \;
tar czf .carry/root.tar.gz -C .carry root
rm -rf .carry/root
echo "prepare-carry: sizes (the device tool's limit is 64 MiB with the tracked files):"
du -shc .carry/build .carry/root.tar.gz
if [ -f .nccl/libnccl.so.2 ]; then
    du -sh .nccl
    echo "prepare-carry: carry [\".carry\", \".nccl\"] and run sh tests/gpu/stage.sh there"
else
    echo "prepare-carry: carry [\".carry\"] and run sh tests/gpu/stage.sh there" \
         "(no .nccl/libnccl.so.2: world 2 and 4 will not run on one GPU)"
fi
