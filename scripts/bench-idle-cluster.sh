#!/usr/bin/env bash
# Idle CPU of a 3-node cluster holding QUEUES durable queues, all declared through node 2
# (so nodes 1 and 3 hold stand-ins for every one), BINDINGS of them (default 0) bound to
# amq.direct through node 1's HTTP API: each node's utime+stime from /proc over 30 s,
# starting 6 s after the declarations. docs/benchmarks.md, "Idle 3-node cluster".
#
#   scripts/bench-idle-cluster.sh WARREN WARREN_PERF QUEUES [BINDINGS]
#
# Uses scripts/cluster3.sh (127.0.0.1-3, AMQP 5672; check nothing else listens there first)
# and stops the cluster at the end.
set -euo pipefail
warren=${1:?warren binary}
perf=${2:?warren-perf binary}
queues=${3:?queues}
bindings=${4:-0}
here=$(cd "$(dirname "$0")" && pwd)
"$here/cluster3.sh" start "$warren" >/dev/null
trap '"$here/cluster3.sh" stop' EXIT
read -r -a pids <<<"$("$here/cluster3.sh" pids)"
clients=20
jobs=()
for c in $(seq 1 $clients); do
    "$perf" --uri "amqp://guest:guest@127.0.0.2:5672/%2f" -u "idle-c$c" \
        --queues $(((queues + clients - 1) / clients)) -x 0 -y 0 -z 0.01 --keep --durable \
        >/dev/null 2>&1 &
    jobs+=($!)
done
for job in "${jobs[@]}"; do wait "$job"; done
if [ "$bindings" -gt 0 ]; then
    api=http://guest:guest@127.0.0.1:15672/api
    names=$(curl -sf "$api/queues/%2f?columns=name" | tr ',' '\n' |
        sed -n 's/.*"name":"\([^"]*\)".*/\1/p')
    head -n "$bindings" <<<"$names" | while read -r q; do
        curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
            -d "{\"routing_key\":\"$q\"}" "$api/bindings/%2f/e/amq.direct/q/$q"
    done
    echo "bound $(curl -sf "$api/bindings/%2f" | grep -o '"source":"amq.direct"' | wc -l) queues to amq.direct"
fi
sleep 6
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
before=()
for pid in "${pids[@]}"; do before+=("$(cpu "$pid")"); done
sleep 30
line="idle 30 s with $queues queues homed on node 2 and $bindings bindings:"
for i in 0 1 2; do
    line+=$(awk -v b="${before[$i]}" -v a="$(cpu "${pids[$i]}")" -v t="$ticks" \
        'BEGIN {printf " n%d %.1f%%", '"$((i + 1))"', (a - b) * 100 / t / 30}')
done
echo "$line (load $(cut -d' ' -f1 /proc/loadavg))"
