#!/bin/sh
# build_bench.sh - wall time of `ddpc build` of the example, CPU only and
# with the CUDA backend linked.
#
#   bench/build_bench.sh [RUNS] [DDPC]     default RUNS=10, DDPC=build/bin/ddpc
#
# Each variant is built RUNS times into a temporary directory after one
# untimed warm-up build (page cache, dynamic loader); the figure is the
# median. With hyperfine installed it does the timing (--runs RUNS
# --warmup 1, its median); otherwise a loop around `date +%s.%N`.
#   cpu   ddpc build examples/fashion-mnist.yaml --cpu-only
#   cuda  ddpc build examples/fashion-mnist.yaml   (accelerator auto: bakes
#         the path of the CUDA plugin libddprt_cuda.so, loaded at run time
#         only when a GPU is used; only when ddpc was built with nvcc, else
#         reported as skipped)
# The target (issue 6) is <= 0.5 s CPU only.
set -eu
RUNS=${1:-10}
DDPC=${2:-build/bin/ddpc}
TOP=$(cd "$(dirname "$0")/.." && pwd)
case $DDPC in /*) ;; *) DDPC=$TOP/$DDPC ;; esac
[ -x "$DDPC" ] || { echo "build_bench: $DDPC not built (run make)" >&2; exit 2; }
SPEC=$TOP/examples/fashion-mnist.yaml
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM

# median of the numbers on stdin, one a line
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bench NAME ARGS...: prints "NAME median min max" in seconds
bench() {
    name=$1
    shift
    "$DDPC" build "$SPEC" -o "$TMP/job-$name" "$@" 2>/dev/null   # warm-up, and must work
    if command -v hyperfine >/dev/null 2>&1; then
        # ddpc's arguments are ours (no spaces), so one command string is safe
        hyperfine -N --runs "$RUNS" --warmup 1 --export-json "$TMP/$name.json" \
            "$DDPC build $SPEC -o $TMP/job-$name $*" >/dev/null 2>&1
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0];
print(sys.argv[2], r["median"], r["min"], r["max"])' "$TMP/$name.json" "$name"
        return
    fi
    : > "$TMP/$name.times"
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        t0=$(date +%s.%N)
        "$DDPC" build "$SPEC" -o "$TMP/job-$name" "$@" 2>/dev/null
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }' >> "$TMP/$name.times"
        i=$((i + 1))
    done
    printf '%s %s %s %s\n' "$name" "$(median < "$TMP/$name.times")" \
        "$(sort -g "$TMP/$name.times" | head -n 1)" "$(sort -g "$TMP/$name.times" | tail -n 1)"
}

tool=loop
command -v hyperfine >/dev/null 2>&1 && tool=hyperfine
echo "build_bench: $RUNS runs each ($tool), $(nproc) CPUs, $("$DDPC" --version)"
{
    bench cpu --cpu-only
    if "$DDPC" --version | grep -q "CUDA backend built"; then
        bench cuda
    else
        echo "cuda skipped"
    fi
} | while read -r name med lo hi; do
    if [ "$med" = skipped ]; then
        echo "  $name: skipped (this ddpc was built without CUDA)"
        continue
    fi
    printf '  %-4s median %.3f s  (min %.3f, max %.3f)' "$name" "$med" "$lo" "$hi"
    [ "$name" = cpu ] && awk -v m="$med" 'BEGIN { printf (m <= 0.5 ? "  <= 0.5 s: OK" : "  > 0.5 s: SLOW") }'
    echo
done
