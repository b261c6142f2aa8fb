#!/usr/bin/env bash
# Queue declarations per second through a follower of a 3-node cluster, with each node's CPU
# per declaration (utime+stime from /proc over the run). docs/benchmarks.md, "Cluster
# metadata and idle cost".
#
#   scripts/bench-metadata.sh WARREN WARREN_PERF CLIENTS QUEUES_PER_CLIENT [ROUNDS]
#
# Starts the cluster with scripts/cluster3.sh (127.0.0.1-3, AMQP 5672; check nothing else
# listens there first), finds a follower, and runs CLIENTS warren-perf processes at once
# against it, each declaring QUEUES_PER_CLIENT durable queues one after another (one
# declaration in flight per client; `-z 0.01` ends each right after). ROUNDS (default 1) repeats the run on the same cluster,
# so later rounds start with the earlier rounds' queues in place. Stops the cluster at the end.
set -euo pipefail
warren=${1:?warren binary}
perf=${2:?warren-perf binary}
clients=${3:?clients}
per_client=${4:?queues per client}
rounds=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)
dir=${WARREN_CLUSTER_DIR:-/tmp/warren-cluster3}
"$here/cluster3.sh" start "$warren" >/dev/null
trap '"$here/cluster3.sh" stop' EXIT
read -r -a pids <<<"$("$here/cluster3.sh" pids)"
follower=
for _ in $(seq 1 50); do
    for n in 1 2 3; do
        leader=$(curl -s -u guest:guest "http://127.0.0.$n:15672/api/cluster-status" |
            grep -o '"leader":"[^"]*"' | head -1 || true)
        if [ -n "$leader" ] && ! grep -q "127.0.0.$n\"" <<<"$leader"; then
            follower=$n
            break 2
        fi
    done
    sleep 0.2
done
if [ -z "$follower" ]; then
    echo "no leader known after 10 s; logs in $dir/n*/log" >&2
    exit 1
fi
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
for round in $(seq 1 "$rounds"); do
    before=()
    for pid in "${pids[@]}"; do before+=("$(cpu "$pid")"); done
    start=$(date +%s.%N)
    jobs=()
    for c in $(seq 1 "$clients"); do
        "$perf" --uri "amqp://guest:guest@127.0.0.$follower:5672/%2f" -u "meta-r$round-c$c" \
            --queues "$per_client" -x 0 -y 0 -z 0.01 --keep --durable >/dev/null 2>"$dir/perf-$c.err" &
        jobs+=($!)
    done
    failed=0
    for job in "${jobs[@]}"; do wait "$job" || failed=$((failed + 1)); done
    end=$(date +%s.%N)
    total=$((clients * per_client))
    line=$(awk -v s="$start" -v e="$end" -v n="$total" \
        'BEGIN {printf "round %s: %d declarations through node %s in %.2f s: %.0f/s", "'"$round"'", n, "'"$follower"'", e - s, n / (e - s)}')
    cpus=""
    for i in 0 1 2; do
        after=$(cpu "${pids[$i]}")
        cpus+=$(awk -v b="${before[$i]}" -v a="$after" -v t="$ticks" -v n="$total" \
            'BEGIN {printf " n%d %.3f ms", '"$((i + 1))"', (a - b) * 1000 / t / n}')
    done
    [ "$failed" = 0 ] || cpus+="; $failed clients failed (see $dir/perf-*.err)"
    echo "$line; CPU per declaration:$cpus"
done
# Every declaration is on every node.
for n in 1 2 3; do
    queues=$(curl -s -u guest:guest "http://127.0.0.$n:15672/api/overview" |
        grep -o '"queues":[0-9]*' | head -1 | cut -d: -f2)
    echo "node $n has ${queues:-?} queues (expected $((rounds * clients * per_client)))"
done
