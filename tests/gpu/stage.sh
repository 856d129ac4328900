#!/bin/sh
# tests/gpu/stage.sh - the one call on a lent GPU machine (tests/gpu/README.md
# has the exact device `run`): run THERE from the repo root, with .carry
# (tests/gpu/prepare-carry.sh, here) and, if made, .nccl carried.
#
# It never stops early and tells everything in one call:
#   $OUT/env.txt      the machine: OS, CPUs, memory, /dev/shm, the GPU,
#                     driver, compute mode, MIG, the toolkit, PyTorch and its
#                     NCCL, which of m4/cc/dpkg/python3/... exist, where each
#                     library of test_gpu, ddpc and the CUDA plugin resolves
#   $OUT/results.tsv  one line per finding: the stage's own checks (kind
#                     "image"), then test_gpu's (probe, env, every check,
#                     every part, its summary), then the bench's
#   $OUT/test_gpu.log test_gpu's whole output (parts in order: ops,
#                     training, init-timeout, e2e, nccl2, overlap2, nccl4,
#                     overlap4; each with a deadline, 410 s in all)
#   $OUT/bench.log    the capped GPT-2 bench (bench/gpu/run.py --models gpt2)
# and prints a short summary LAST (only the end of the output comes back).
#
#   DDPC_TEST_PARTS=nccl2,overlap2 sh tests/gpu/stage.sh   rerun some parts
#   DDPC_STAGE_BENCH=0 sh tests/gpu/stage.sh               no bench
#   DDPC_TEST_PARTS=none DDPC_STAGE_BENCH_MODELS=mlp,cnn,gpt,gpt2 \
#       DDPC_STAGE_BENCH_S=500 sh tests/gpu/stage.sh       the whole bench only
#
# Exit status: 0 every part ran and passed (and the bench ran); 1 a failure;
# 2 what ran passed but world 2/4 could not run (one GPU, NCCL < 2.30); 3 no
# GPU here (a dry run: everything but the GPU work still happens).
#
# Libraries: the carried Debian tree (.carry/root.tar.gz, unpacked under
# /tmp) supplies only the sonames the image lacks (ldconfig -p), so the
# image's own zlib or OpenBLAS are never displaced under python3; its -dev
# link names go on LIBRARY_PATH for the jobs ddpc builds; its m4 goes on
# PATH if the image has none. NCCL: .nccl/libnccl.so.2 if carried (first on
# LD_LIBRARY_PATH), else the image's. cuBLAS, cudart, NCCL not found
# through the programs' RUNPATH (/usr/local/cuda/lib64): looked up in the
# CUDA 13 wheels (site-packages/nvidia/cu13/lib, nvidia/*/lib).
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
O=${OUT:-/tmp/ddpc-stage-out}
mkdir -p "$O" || exit 1
RES=$O/results.tsv
: > "$RES"
ENVF=$O/env.txt
: > "$ENVF"
TOP=$PWD

# one results line: kind, verdict, text (the stage is its own "part")
res() { printf '%s\tstage\t%s\t%s\n' "$1" "$2" "$3" >> "$RES"; }
sec() { printf '\n== %s\n' "$1" >> "$ENVF"; }
run_env() { "$@" >> "$ENVF" 2>&1 || printf '(exit %s: %s)\n' "$?" "$*" >> "$ENVF"; }

B=.carry/build
[ -x "$B/tests/test_gpu" ] || B=build
if [ -x "$B/tests/test_gpu" ] && [ -x "$B/bin/ddpc" ] && [ -f "$B/lib/ddpc/libddprt_cuda.so" ]; then
    res image PASS "build: $B"
else
    res image FAIL "build: neither .carry/build nor build holds test_gpu, ddpc and the plugin (run tests/gpu/prepare-carry.sh here and carry .carry)"
fi

# ---- the carried Debian tree, for what the image lacks ----
D=/tmp/ddpc-stage-$$
mkdir -p "$D/lib" "$D/bin"
R=""
if [ -f .carry/root.tar.gz ]; then
    if tar xzf .carry/root.tar.gz -C "$D"; then
        R=$D/root
        res image PASS "carried Debian tree unpacked with tar (no dpkg needed)"
    else
        res image FAIL "tar xzf .carry/root.tar.gz failed"
    fi
fi
LDCONFIG=$(command -v ldconfig || { [ -x /sbin/ldconfig ] && echo /sbin/ldconfig; } ||
           { [ -x /usr/sbin/ldconfig ] && echo /usr/sbin/ldconfig; })
have_so() { [ -n "$LDCONFIG" ] && "$LDCONFIG" -p 2>/dev/null | grep -q "^[[:space:]]*$1 "; }
borrowed=""
if [ -n "$R" ]; then
    for so in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libyaml-0.so.2 libdeflate.so.0 libz.so.1; do
        if ! have_so "$so"; then
            f=$(find "$R" -name "$so" | head -n 1)
            if [ -n "$f" ]; then
                ln -sf "$f" "$D/lib/$so"
                borrowed="$borrowed $so"
            fi
        fi
    done
    L=$R/usr/lib/x86_64-linux-gnu
    LIBRARY_PATH=$L:$L/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LIBRARY_PATH
    if ! command -v m4 >/dev/null 2>&1 && [ -x "$R/usr/bin/m4" ]; then
        ln -sf "$R/usr/bin/m4" "$D/bin/m4"
        borrowed="$borrowed m4"
    fi
fi
PATH=$D/bin:$PATH
LD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
res image PASS "taken from the carried tree (the image lacks them):${borrowed:- nothing}"

# ---- NCCL: the carried one, else the image's ----
# (a library carried in pieces over several calls of one warm machine,
# .nccl/part-*, is joined first and checked against .nccl/libnccl.so.2.sha256)
if [ ! -f .nccl/libnccl.so.2 ] && ls .nccl/part-* >/dev/null 2>&1; then
    cat .nccl/part-* > .nccl/libnccl.so.2.tmp
    if [ -f .nccl/libnccl.so.2.sha256 ] &&
       [ "$(sha256sum < .nccl/libnccl.so.2.tmp | cut -d' ' -f1)" = "$(cut -d' ' -f1 .nccl/libnccl.so.2.sha256)" ]; then
        mv .nccl/libnccl.so.2.tmp .nccl/libnccl.so.2
        res image PASS "NCCL: joined .nccl/part-* (sha256 matches)"
    else
        rm -f .nccl/libnccl.so.2.tmp
        res image FAIL "NCCL: .nccl/part-* do not join into the library .nccl/libnccl.so.2.sha256 names (a piece is missing?)"
    fi
fi
if [ -f .nccl/libnccl.so.2 ]; then
    LD_LIBRARY_PATH=$TOP/.nccl:$LD_LIBRARY_PATH
    res image PASS "NCCL: carried .nccl/libnccl.so.2"
fi
export PATH LD_LIBRARY_PATH

# ---- CUDA libraries missing from the RUNPATH: the CUDA 13 wheels ----
missing_libs() {
    for f in "$B/tests/test_gpu" "$B/lib/ddpc/libddprt_cuda.so" "$B/bin/ddpc"; do
        [ -e "$f" ] && ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'
    done | sort -u
}
miss=$(missing_libs)
if [ -n "$miss" ] && command -v python3 >/dev/null 2>&1; then
    bases=$(timeout 20 python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
    for so in $miss; do
        for base in $bases; do
            f=$(find "$base" -maxdepth 3 -name "$so" 2>/dev/null | head -n 1)
            if [ -n "$f" ]; then
                LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$f")
                res image PASS "$so: from $(dirname "$f") (not in the RUNPATH /usr/local/cuda/lib64)"
                break
            fi
        done
    done
    export LD_LIBRARY_PATH
fi
miss=$(missing_libs)
if [ -n "$miss" ]; then
    res image FAIL "libraries not found: $(echo "$miss" | tr '\n' ' ')"
else
    res image PASS "every library of test_gpu, ddpc and the CUDA plugin resolves"
fi
nccl_path=$(ldd "$B/tests/test_gpu" 2>/dev/null | awk '/libnccl/ {print $3}')
res image INFO "NCCL loaded: ${nccl_path:-not found}"

# ---- the environment ----
sec "date, host, OS"
run_env date -u
run_env uname -a
run_env sh -c 'head -4 /etc/os-release'
run_env sh -c 'ldd --version | head -1'
sec "CPUs, memory, /dev/shm, /tmp"
run_env nproc
run_env free -m
run_env df -h /dev/shm /tmp
shm_kb=$(df -k /dev/shm 2>/dev/null | awk 'NR==2 {print $2}')
if [ -n "$shm_kb" ] && [ "$shm_kb" -ge 1048576 ]; then
    res image PASS "/dev/shm: $((shm_kb / 1024)) MiB"
else
    res image WARN "/dev/shm: ${shm_kb:-?} KiB; NCCL's shared-memory transport and the CPU workers need more than 1 GiB"
fi
sec "tools"
for t in m4 cc gcc nvcc dpkg python3 ldconfig nvidia-smi timeout tar gzip; do
    p=$(command -v "$t" 2>/dev/null)
    printf '%s: %s\n' "$t" "${p:-MISSING}" >> "$ENVF"
done
for t in m4 cc python3; do
    if command -v "$t" >/dev/null 2>&1; then res image PASS "$t: $(command -v "$t")"
    else res image FAIL "$t: missing (ddpc build or the bench needs it)"; fi
done
if command -v dpkg >/dev/null 2>&1; then res image INFO "dpkg: present (not needed)"
else res image INFO "dpkg: missing (not needed: the tree came unpacked)"; fi
# can cc link a job against the runtime's libraries (ddpc build does)?
printf 'int main(void){return 0;}\n' > "$D/t.c"
if cc "$D/t.c" -o "$D/t" -lopenblas -ldeflate -lz -lm -lpthread >> "$ENVF" 2>&1 && "$D/t"; then
    res image PASS "cc links -lopenblas -ldeflate -lz and the result runs"
else
    res image FAIL "cc cannot link -lopenblas -ldeflate -lz (see env.txt): ddpc build will fail"
fi
sec "GPU"
run_env nvidia-smi
run_env nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current,persistence_mode --format=csv
gpu=$(nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current --format=csv,noheader 2>/dev/null | head -n 1)
if [ -n "$gpu" ]; then res image PASS "GPU: $gpu (name, driver, compute mode, MIG)"
else res image FAIL "nvidia-smi: no GPU answered"; fi
sec "CUDA toolkit"
run_env nvcc --version
run_env sh -c 'ls -l /usr/local/cuda/lib64/ | grep -E "cublas|cudart|nccl"'
sec "PyTorch and the NVIDIA wheels"
run_env timeout 30 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", torch.cuda.nccl.version(), "cuda available", torch.cuda.is_available())'
run_env sh -c 'timeout 20 python3 -m pip list 2>/dev/null | grep -iE "^(torch|nvidia-(nccl|cublas|cuda-runtime))"'
sec "environment the programs run with"
printf 'PATH=%s\nLD_LIBRARY_PATH=%s\nLIBRARY_PATH=%s\n' "$PATH" "$LD_LIBRARY_PATH" "${LIBRARY_PATH:-}" >> "$ENVF"
sec "ldd"
for f in "$B/tests/test_gpu" "$B/bin/ddpc" "$B/lib/ddpc/libddprt_cuda.so"; do
    printf -- '-- %s\n' "$f" >> "$ENVF"
    run_env ldd "$f"
done

# ---- test_gpu: every part, world 1 first, world 4 last ----
export DDPC_BUILD="$TOP/$B" DDPC_REQUIRE_GPU=1 DDPC_TEST_OUT="$RES" PYTHONUNBUFFERED=1
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
t=$(date +%s)
if [ -x "$B/tests/test_gpu" ]; then
    # its parts' deadlines sum to 410 s; this bound is only a backstop
    timeout -k 5 430 "$B/tests/test_gpu" > "$O/test_gpu.log" 2>&1
    trc=$?
else
    echo "stage: $B/tests/test_gpu is not there" > "$O/test_gpu.log"
    trc=1
fi
tsec=$(( $(date +%s) - t ))
res test_gpu "$( [ $trc -eq 0 ] && echo PASS || echo FAIL)" "exit $trc after $tsec s"
nogpu=0
grep -q "^probe	main	FAIL	no GPU" "$RES" && nogpu=1

# ---- the capped GPT-2 bench ----
brc=-
if [ "${DDPC_STAGE_BENCH:-1}" = 0 ]; then
    res bench SKIP "DDPC_STAGE_BENCH=0"
elif [ $nogpu = 1 ]; then
    res bench SKIP "no GPU"
    echo "stage: no GPU: the bench did not run" > "$O/bench.log"
else
    t=$(date +%s)
    cap=${DDPC_STAGE_BENCH_S:-100}
    timeout -k 5 "$cap" python3 bench/gpu/run.py --models "${DDPC_STAGE_BENCH_MODELS:-gpt2}" \
        > "$O/bench.log" 2>&1
    brc=$?
    res bench "$( [ $brc -eq 0 ] && echo PASS || echo FAIL)" "exit $brc after $(( $(date +%s) - t )) s (124: capped at $cap s)"
fi
rm -rf "$D"

# ---- the summary, last ----
echo "==== ddpc GPU stage, $(date -u +%FT%TZ), $(( $(date +%s) - T0 )) s"
echo "GPU: ${gpu:-none}; NCCL loaded: ${nccl_path:-?}"
grep -E '^(test_gpu: |FAIL test_gpu)' "$O/test_gpu.log" | head -n 3
grep -E '^test_gpu: [0-9]+ part' "$O/test_gpu.log" | tail -n 1
echo "-- the machine (image checks; all in $O/env.txt)"
awk -F'\t' '$1 == "image" && $3 != "PASS" {printf "%s %s\n", $3, $4}' "$RES"
echo "-- parts (results.tsv)"
awk -F'\t' '$1 == "part" {printf "%-7s %-13s %s\n", $3, $2, $4}' "$RES"
nfail=$(awk -F'\t' '$1 == "check" && $3 == "FAIL"' "$RES" | wc -l)
echo "-- failed checks: $nfail (the first 30; test_gpu.log has each in full)"
awk -F'\t' '$1 == "check" && $3 == "FAIL" {printf "FAIL %s: %.230s\n", $2, $4}' "$RES" | head -n 30
echo "-- bench (bench.log)"
grep -E '^(bench/gpu|torch|ddpc|\|)' "$O/bench.log" 2>/dev/null | tail -n 8
if [ $nogpu = 1 ]; then
    verdict=NO-GPU rc=3
elif [ $trc -eq 0 ] && { [ "$brc" = 0 ] || [ "$brc" = - ]; } && [ "$nfail" -eq 0 ]; then
    verdict=PASS rc=0
elif [ $trc -eq 2 ] && [ "$nfail" -eq 0 ] && { [ "$brc" = 0 ] || [ "$brc" = - ]; }; then
    verdict="PARTIAL (world 2/4 not run: see the parts)" rc=2
else
    verdict=FAIL rc=1
fi
echo "==== STAGE: $verdict (test_gpu exit $trc, bench exit $brc); files in $O"
exit $rc
