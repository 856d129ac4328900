#!/bin/bash
# slurm_cluster.sh - a real two-node Slurm cluster on one machine, for the
# multinode suite (tests/test_multinode.c runs it; it can also be run by hand
# as root: tests/slurm_cluster.sh WORKDIR DDPC [TAG]). TAG (default ds<pid>)
# names the namespaces TAGa and TAGb, so a caller can remove them even if
# this script is killed before its EXIT trap runs.
#
# Two network namespaces joined by a veth pair are the hosts. munged runs on
# the machine with its own key and socket; slurmctld and node n0's slurmd run
# in the first namespace, n1's slurmd in the second, each started with
# `nsenter --net` inside `unshare --mount` (not `ip netns exec`, which
# remounts /sys and breaks slurmd), with its own spool, TmpFS and an
# /etc/hosts that names the nodes. proctrack/linuxproc, no cgroups; every job
# has a time limit (the spec's launch.time_limit, and the partition's
# MaxTime). Everything is started here and stopped by the EXIT trap, passed
# or failed.
#
# Cases, each bounded in time, each printing "case NAME: ok" or "case NAME:
# FAILED: why":
#   completed  the sbatch script `ddpc build` generated, unchanged: COMPLETED,
#              and the run trained to its end on both nodes
#   scancel    scancel mid-run: CANCELLED, no process of the job left
#   usr1       scancel -s USR1 mid-run (what sbatch --signal=USR1@90 sends):
#              both nodes stop as on SIGTERM, saying so, and exit 138
#   requeue    node n1 killed mid-run (its slurmd and the job's processes on
#              it), the node set down: Slurm requeues the job, n1 comes back,
#              and the second run resumes from the last checkpoint
# Exit status: 0 all passed; 77 SKIP (reason on stdout); 1 a case failed.
set -u
T_START=$(date +%s.%N)

WORK=${1:?usage: slurm_cluster.sh WORKDIR DDPC}
DDPC=${2:?usage: slurm_cluster.sh WORKDIR DDPC}
TAG=${3:-ds$$}
NS0=${TAG}a NS1=${TAG}b
VE0=${TAG}x VE1=${TAG}y
N=$(( $$ % 200 + 20 ))
IP0=10.250.$N.1 IP1=10.250.$N.2
PIDS=()

skip() { echo "SKIP slurm: $*"; exit 77; }
say() { echo "slurm: $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, slurmd)"
for t in munged slurmctld slurmd sbatch scontrol scancel nsenter unshare ip; do
    command -v "$t" >/dev/null 2>&1 || skip "$t not found (apt-get install slurmctld slurmd slurm-client munge)"
done

cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    for ns in "$NS0" "$NS1"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    done
    [ -f "$WORK/munge/pid" ] && kill -9 "$(cat "$WORK/munge/pid")" 2>/dev/null
    ip netns del "$NS0" 2>/dev/null
    ip netns del "$NS1" 2>/dev/null
    wait 2>/dev/null
}
trap cleanup EXIT

mkdir -p "$WORK"/{munge,ctl,n0/tmp,n1/tmp,tmpfs,job} || exit 1
chmod 700 "$WORK/munge"

# ---- hosts ----
ip netns add "$NS0" && ip netns add "$NS1" &&
ip link add "$VE0" netns "$NS0" type veth peer "$VE1" netns "$NS1" &&
ip -n "$NS0" addr add "$IP0/24" dev "$VE0" && ip -n "$NS1" addr add "$IP1/24" dev "$VE1" &&
ip -n "$NS0" link set "$VE0" up && ip -n "$NS1" link set "$VE1" up &&
ip -n "$NS0" link set lo up && ip -n "$NS1" link set lo up || skip "cannot make network namespaces"
printf '127.0.0.1 localhost\n%s %s-n0\n%s %s-n1\n' "$IP0" "$TAG" "$IP1" "$TAG" > "$WORK/hosts"

# ---- munge ----
dd if=/dev/urandom of="$WORK/munge/key" bs=1024 count=1 status=none && chmod 400 "$WORK/munge/key"
munged -f --key-file="$WORK/munge/key" --socket="$WORK/munge/sock" \
    --pid-file="$WORK/munge/pid" --log-file="$WORK/munge/log" \
    --seed-file="$WORK/munge/seed" >/dev/null 2>&1 || skip "munged would not start: $(tail -2 "$WORK/munge/log" 2>/dev/null)"

# ---- slurm.conf ----
CONF=$WORK/slurm.conf
cat > "$CONF" <<EOF
ClusterName=$TAG
SlurmctldHost=$TAG-n0($IP0)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it starts again
# (the old run's credentials must expire first); 120 s by default
AuthInfo=socket=$WORK/munge/sock,cred_expire=5
StateSaveLocation=$WORK/ctl
SlurmctldPidFile=$WORK/ctl/slurmctld.pid
SlurmctldLogFile=$WORK/ctl/slurmctld.log
SlurmdSpoolDir=$WORK/%n-spool
SlurmdPidFile=$WORK/%n.pid
SlurmdLogFile=$WORK/%n.log
TmpFS=$WORK/tmpfs
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
LaunchParameters=use_interactive_step
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
MinJobAge=600
KillWait=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
JobRequeue=1
NodeName=$TAG-n0 NodeAddr=$IP0 CPUs=2 State=UNKNOWN
NodeName=$TAG-n1 NodeAddr=$IP1 CPUs=2 State=UNKNOWN
PartitionName=ddpc Nodes=$TAG-n0,$TAG-n1 Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF=$CONF

# A daemon in a host: its own mount namespace (this /etc/hosts, its own
# TmpFS), its own host name (slurmctld checks it is SlurmctldHost) and the
# host's network namespace.
in_host() {  # NS HOSTNAME TMPDIR CMD...
    local ns=$1 name=$2 tmp=$3
    shift 3
    unshare --mount --uts --propagation private -- sh -c '
        hostname "$4" && mount --bind "$1" /etc/hosts && mount --bind "$2" "$3" || exit 1
        shift 2
        shift 2; exec nsenter --net=/run/netns/'"$ns"' -- "$@"' sh "$WORK/hosts" "$tmp" "$WORK/tmpfs" "$name" "$@"
}
# a client command on host n0 (it reaches slurmctld)
ctl() { nsenter --net=/run/netns/"$NS0" -- "$@"; }

in_host "$NS0" "$TAG-n0" "$WORK/n0/tmp" slurmctld -D -f "$CONF" >"$WORK/ctl/out" 2>&1 & PIDS+=($!)
start_slurmd() {  # k
    local ns=$NS0
    [ "$1" = 1 ] && ns=$NS1
    in_host "$ns" "$TAG-n$1" "$WORK/n$1/tmp" slurmd -D -f "$CONF" -N "$TAG-n$1" >"$WORK/n$1/out" 2>&1 &
    PIDS+=($!)
    eval "SLURMD$1=$!"
}
start_slurmd 0
start_slurmd 1

wait_for() {  # SECONDS DESCRIPTION COMMAND...: polls until COMMAND succeeds
    local until=$(( $(date +%s) + $1 )) what=$2
    shift 2
    while ! "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$until" ]; then echo "timed out waiting for $what"; return 1; fi
        sleep 0.3
    done
}
nodes_idle() { [ "$(ctl sinfo -h -o %t -p ddpc 2>/dev/null | sort -u | tr -d '\n')" = idle ]; }
if ! wait_for 30 "both nodes idle" nodes_idle; then
    echo "slurm: cluster did not come up:"; ctl sinfo 2>&1; tail -5 "$WORK/ctl/slurmctld.log" "$WORK"/*.log 2>/dev/null
    exit 1
fi
say "cluster up: $(ctl sinfo -h -o '%P %D %t' 2>&1) after $(echo "$(date +%s.%N) - $T_START" | bc) s"

# ---- the job: ddpc build, the generated sbatch unchanged ----
cd "$WORK/job" || exit 1
cat > slj.yaml <<EOF
name: slj
devices: 1
accelerator: cpu
epochs: \${EPOCHS}
batch_size: 16
learning_rate: 0.01
lr_scaling: none
seed: 3
nccl_timeout: 5s
checkpoint_dir: ckpt
model: {layers: [16, 32, 4]}
logging: {every_n_steps: 8}
data:
  train: {format: synthetic, samples: 1024, features: 16, classes: 4}
launch:
  num_nodes: 2
  launcher: slurm
  master_port: 29577
  time_limit: 3m
EOF
build() {  # NAME EPOCHS
    sed -e "s/name: slj/name: $1/" -e "s/\${EPOCHS}/$2/" slj.yaml > "$1.yaml" &&
    "$DDPC" build "$1.yaml" -o "$1" >"$1.build" 2>&1 || { cat "$1.build"; return 1; }
}
state() { ctl scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
restarts() { ctl scontrol show job "$1" 2>/dev/null | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p'; }
submit() { ctl sbatch --parsable "$1.sbatch" | cut -d';' -f1; }
status=0
T0=$(date +%s.%N)
result() {
    local t
    t=$(echo "$(date +%s.%N) - $T0" | bc)
    if [ "$2" = ok ]; then echo "case $1: ok (at $t s)"; else echo "case $1: FAILED: $2"; status=1; fi
}
job_procs() {  # NAME: processes of the job binary NAME left on either host
    local n=0 p
    for p in $(ip netns pids "$NS0"; ip netns pids "$NS1"); do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] && n=$((n + 1))
    done
    echo $n
}

# completed
if build slc 2; then
    id=$(submit slc)
    is_done() { case $(state "$id") in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) return 0;; esac; return 1; }
    if ! wait_for 40 "job $id to end" is_done; then
        result completed "job $id still $(state "$id") after 40 s"
    elif [ "$(state "$id")" != COMPLETED ]; then
        result completed "job $id ended $(state "$id"): $(tail -5 "slc-$id.out" 2>/dev/null)"
    elif ! grep -q "^0: done epochs=2" "slc-$id.out"; then
        result completed "no labelled 'done' line from node 0: $(tail -5 "slc-$id.out")"
    else
        result completed ok
    fi
else
    result completed "ddpc build failed"
fi

# scancel
if build slx 400; then
    id=$(submit slx)
    running() { [ "$(state "$id")" = RUNNING ] && grep -q "epoch 2/" "slx-$id.out" 2>/dev/null; }
    if ! wait_for 40 "job $id to train" running; then
        result scancel "job $id never trained: $(state "$id")"
    else
        ctl scancel "$id"
        gone() { [ "$(state "$id")" = CANCELLED ] && [ "$(job_procs slx)" = 0 ]; }
        if wait_for 20 "job $id cancelled, its processes gone" gone; then
            result scancel ok
        else
            result scancel "after scancel: state $(state "$id"), $(job_procs slx) processes left"
        fi
    fi
else
    result scancel "ddpc build failed"
fi

# usr1: the signal Lightning users ask for before the time limit
if build slu 400; then
    id=$(submit slu)
    running() { [ "$(state "$id")" = RUNNING ] && grep -q "epoch 2/" "slu-$id.out" 2>/dev/null; }
    if ! wait_for 40 "job $id to train" running; then
        result usr1 "job $id never trained: $(state "$id")"
    else
        ctl scancel -s USR1 "$id"
        ended() { [ "$(state "$id")" = FAILED ] && [ "$(job_procs slu)" = 0 ]; }
        if ! wait_for 20 "job $id ended, its processes gone" ended; then
            result usr1 "after USR1: state $(state "$id"), $(job_procs slu) processes left"
        elif [ "$(grep -c '^[01]: ddpc: interrupted by SIGUSR1' "slu-$id.out")" != 2 ] ||
             [ "$(grep -c 'Exited with exit code 138' "slu-$id.out")" != 2 ]; then
            result usr1 "not a clean stop on both nodes: $(grep -E 'ddpc|srun' "slu-$id.out" | tr '\n' ';')"
        else
            result usr1 ok
        fi
    fi
else
    result usr1 "ddpc build failed"
fi

# requeue: n1 dies mid-run; Slurm requeues; the second run resumes
if build slr 40; then
    # every checkpoint (one an epoch) takes 0.1 s more, so the 40 epochs last
    # seconds: an unloaded machine trained them all before the poll below
    # saw the job running, and the case failed "never trained: COMPLETED".
    # sbatch exports the submitting environment to the job (--export=ALL).
    id=$(DDPC_TEST_CKPT_SLOW_S=0.1 submit slr)
    trained() { [ "$(state "$id")" = RUNNING ] && grep -q "epoch 3/" "slr-$id.out" 2>/dev/null; }
    if ! wait_for 40 "job $id to train" trained; then
        result requeue "job $id never trained: $(state "$id")"
    else
        # the host dies: Slurm is told (as its SlurmdTimeout would, later),
        # and its slurmd and everything running in it are gone
        ctl scontrol update nodename="$TAG-n1" state=down reason=ddpc-test
        for p in $(ip netns pids "$NS1"); do kill -9 "$p" 2>/dev/null; done
        requeued() { [ "$(restarts "$id")" -ge 1 ] 2>/dev/null && [ "$(state "$id")" = PENDING ]; }
        if ! wait_for 30 "job $id requeued" requeued; then
            result requeue "not requeued: state $(state "$id"), restarts $(restarts "$id")"
        else
            start_slurmd 1
            # back in service by itself (ReturnToService=2) or by this
            ctl scontrol update nodename="$TAG-n1" state=resume 2>/dev/null
            is_done() { case $(state "$id") in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) return 0;; esac; return 1; }
            if ! wait_for 60 "job $id to end after requeue" is_done; then
                result requeue "after requeue: still $(state "$id") ($(ctl scontrol show job "$id" | grep -o 'Reason=[^ ]*\|BeginTime=[^ ]*' | tr '\n' ' ')); nodes: $(ctl sinfo -h -N -o '%N %t %E' | tr '\n' ';')"
            elif [ "$(state "$id")" != COMPLETED ]; then
                result requeue "after requeue: $(state "$id"): $(tail -5 "slr-$id.out")"
            elif ! grep -q "^0: resumed from ckpt/" "slr-$id.out"; then
                result requeue "the second run did not resume: $(grep -E '^0: (resumed|done)' "slr-$id.out")"
            else
                result requeue ok
            fi
        fi
    fi
else
    result requeue "ddpc build failed"
fi

exit $status
