#!/bin/sh
# check_bench.sh - `ddpc check` throughput over many specs in one call.
#
#   bench/check_bench.sh [N] [DDPC]     default N=2000, DDPC=build/bin/ddpc
#
# Copies the example and the valid corpus into a temporary directory until
# there are N specs (data paths made absolute so header reads still work),
# then times one `ddpc check` over all of them, with data-header reads on
# and with --no-data. Prints specs per second; the target is 5000+/s.
set -eu
N=${1:-2000}
DDPC=${2:-build/bin/ddpc}
TOP=$(cd "$(dirname "$0")/.." && pwd)
case $DDPC in /*) ;; *) DDPC=$TOP/$DDPC ;; esac
[ -x "$DDPC" ] || { echo "check_bench: $DDPC not built (run make)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM

# Only self-contained sources: the example (absolute data paths) and the
# synthetic-data corpus specs.
set -- "$TOP/examples/fashion-mnist.yaml" "$TOP/tests/specs/valid/minimal.yaml" \
       "$TOP/tests/specs/valid/sgd-cosine.yaml" "$TOP/tests/specs/valid/aliases.yaml" \
       "$TOP/tests/specs/valid/multinode.yaml"
i=0
while [ "$i" -lt "$N" ]; do
    for src in "$@"; do
        [ "$i" -lt "$N" ] || break
        cp "$src" "$TMP/spec$i.yaml"
        i=$((i + 1))
    done
done

run() {
    start=$(date +%s.%N)
    "$DDPC" check --quiet "$@" "$TMP"/spec*.yaml
    end=$(date +%s.%N)
    echo "$start $end" | awk -v n="$N" -v what="$*" \
        '{ s = $2 - $1; printf "ddpc check %-10s %d specs in %.3f s: %.0f specs/s\n", what, n, s, n / s }'
}
run
run --no-data
