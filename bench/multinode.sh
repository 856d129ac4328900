#!/bin/bash
# multinode.sh - multi-node figures on one machine: two network namespaces
# joined by a veth pair are the hosts (as in tests/test_multinode.c).
#
#   bench/multinode.sh [MAX_MIB]     (as root, after `make all bench`)
#
# 1. all-reduce bandwidth between the two hosts, world 2 and world 4 (2
#    ranks per host): ddpc's gloo path (the communicator jobs use: comm
#    thread, start/wait) against gloo's own ring (gloo::AllreduceRing,
#    nothing of ddpc in the timed loop), at the same sizes, call for call in
#    one process per rank (build/bench/gloo_allreduce both), so both see the
#    same moment of the machine; then world 2 in gloo's options API alone;
# 2. step time of a job on 2 nodes x 1 worker against the same world size
#    on one host (2 workers, shared memory), from the jobs' own
#    samples_per_s and wall_s (medians of 3 runs).
# Everything it makes (namespaces, temp dir) is removed on exit.
set -u
B=${B:-build}
MAX=${1:-64}
TAG=dbench$$
NS0=${TAG}a NS1=${TAG}b
IP0=10.251.$(( $$ % 200 + 20 )).1
IP1=${IP0%.1}.2
WORK=$(mktemp -d)
cleanup() {
    for ns in "$NS0" "$NS1"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NS0" && ip netns add "$NS1" &&
ip link add "${TAG}x" netns "$NS0" type veth peer "${TAG}y" netns "$NS1" &&
ip -n "$NS0" addr add "$IP0/24" dev "${TAG}x" && ip -n "$NS1" addr add "$IP1/24" dev "${TAG}y" &&
ip -n "$NS0" link set "${TAG}x" up && ip -n "$NS1" link set "${TAG}y" up &&
ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up || { echo "cannot make namespaces (root?)"; exit 1; }
in0() { nsenter --net=/run/netns/"$NS0" -- "$@"; }
in1() { nsenter --net=/run/netns/"$NS1" -- "$@"; }

echo "== all-reduce, 2 hosts (veth), world 2 =="
in1 "$B/bench/gloo_allreduce" both 1 2 "$IP0" 29661 "$MAX" >/dev/null &
in0 "$B/bench/gloo_allreduce" both 0 2 "$IP0" 29661 "$MAX"
wait
echo "== all-reduce, 2 hosts (veth), world 4 (ranks 0, 1 on one host, 2, 3 on the other) =="
in0 "$B/bench/gloo_allreduce" both 1 4 "$IP0" 29661 "$MAX" 2 >/dev/null &
in1 "$B/bench/gloo_allreduce" both 2 4 "$IP0" 29661 "$MAX" 2 >/dev/null &
in1 "$B/bench/gloo_allreduce" both 3 4 "$IP0" 29661 "$MAX" 2 >/dev/null &
in0 "$B/bench/gloo_allreduce" both 0 4 "$IP0" 29661 "$MAX" 2
wait
in1 "$B/bench/gloo_allreduce" gloo 1 2 "$IP0" 29661 "$MAX" >/dev/null &
in0 "$B/bench/gloo_allreduce" gloo 0 2 "$IP0" 29661 "$MAX"
wait

echo "== step time: 2 nodes x 1 worker vs 1 node x 2 workers =="
DDPC=$(cd "$B/bin" && pwd)/ddpc
cd "$WORK" || exit 1
spec() {  # NAME NODES DEVICES
    cat > "$1.yaml" <<EOF
name: $1
devices: $3
accelerator: cpu
epochs: 2
batch_size: 64
learning_rate: 0.01
lr_scaling: none
seed: 5
model: {layers: [784, 256, 10]}
data:
  train: {format: synthetic, samples: 32768, features: 784, classes: 10}
launch: {num_nodes: $2, master_addr: $IP0, master_port: 29662}
EOF
    "$DDPC" build "$1.yaml" -o "$1" >/dev/null || exit 1
}
spec two 2 1
spec one 1 2
kv() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | tail -1; }
for run in 1 2 3; do
    in1 ./two --node-rank 1 >/dev/null 2>&1 &
    t=$(in0 ./two --node-rank 0 2>/dev/null | grep '^done')
    wait
    o=$(./one 2>/dev/null | grep '^done')
    echo "run $run: 2 nodes: samples_per_s=$(echo "$t" | kv samples_per_s) wall_s=$(echo "$t" | kv wall_s) steps=$(echo "$t" | kv steps)" \
         " | 1 node: samples_per_s=$(echo "$o" | kv samples_per_s) wall_s=$(echo "$o" | kv wall_s)"
done
