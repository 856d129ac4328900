#!/usr/bin/env bash
# compare.sh - ddpc against PyTorch on the same machine, in the same run.
#
#   bench/compare.sh [EPOCHS]        (from the repository root, after make)
#
# Workload: examples/fashion-mnist.yaml (MLP 784-256-10, Adam 1e-3, batch 64
# per rank, one BLAS thread per rank). Prints each run's summary line and its
# wall time and peak summed PSS (bench/measure.py), then a table. The PyTorch
# rows need Debian's python3-torch; without it they are skipped, and the
# script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-3}
OUT=$(mktemp -d /tmp/ddpc-bench-XXXXXX)
trap 'rm -rf "$OUT"' EXIT

sed "s/^epochs: .*/epochs: $EPOCHS/" examples/fashion-mnist.yaml > "$OUT/fmnist.yaml"
build/bin/ddpc build "$OUT/fmnist.yaml" -o "$OUT/fmnist" >/dev/null
sed -e "s/^epochs: .*/epochs: $EPOCHS/" -e "s/^devices: .*/devices: 1/" \
    -e "s/^nccl_timeout.*//" -e "s/^rank_sync_timeout.*//" \
    examples/fashion-mnist.yaml > "$OUT/fmnist1.yaml"
build/bin/ddpc build "$OUT/fmnist1.yaml" -o "$OUT/fmnist1" >/dev/null

run() {   # label, command...
    local label=$1; shift
    bench/measure.py --label "$label" -- "$@" > "$OUT/$label.out" 2> "$OUT/$label.err" || {
        echo "$label failed:"; cat "$OUT/$label.out" "$OUT/$label.err"; return 1; }
    grep -E '^done ' "$OUT/$label.out" | tail -1 | sed "s/^/$label: /"
    grep '^measure:' "$OUT/$label.err"
}

run ddpc-2w "$OUT/fmnist"
run ddpc-1w "$OUT/fmnist1"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    run torch-ddp-2p /usr/bin/python3 bench/torch_ddp.py --world 2 --epochs "$EPOCHS"
    run torch-1p     /usr/bin/python3 bench/torch_ddp.py --world 1 --epochs "$EPOCHS"
    run torch-1p-2t  /usr/bin/python3 bench/torch_ddp.py --world 1 --threads 2 --epochs "$EPOCHS"
else
    echo "python3-torch not installed: PyTorch rows skipped (apt-get install python3-torch)"
fi

echo
printf '%-12s %14s %14s %12s %14s\n' run samples_per_s first_step_s test_acc peak_pss_mib
for f in "$OUT"/*.out; do
    l=$(basename "$f" .out)
    d=$(grep -E '^done ' "$f" | tail -1)
    m=$(grep '^measure:' "$OUT/$l.err")
    kv() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
    printf '%-12s %14s %14s %12s %14s\n' "$l" "$(kv samples_per_s "$d")" \
        "$(kv first_step_s "$d")" "$(kv test_accuracy "$d")" "$(kv peak_pss_mib "$m")"
done
