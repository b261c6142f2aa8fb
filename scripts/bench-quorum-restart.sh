#!/usr/bin/env bash
# Restart of a node holding MESSAGES queued messages in quorum queues (issue 16's target:
# serving again in under 5 s). A 3-node cluster (scripts/cluster3.sh); QUEUES quorum queues
# declared through node 1 (so it leads them all) and filled with persistent 16-byte messages
# by one confirming producer per queue; then node NODE (default 1, the leader's) is killed
# with SIGKILL and started again with the same command line and data. Prints the time from
# the restart to its AMQP port accepting, and to its management API showing every queue's
# messages again, and to a get through its HTTP API returning a message.
# docs/benchmarks.md, "Quorum queue restart".
#
#   scripts/bench-quorum-restart.sh WARREN WARREN_PERF MESSAGES [QUEUES] [NODE]
set -euo pipefail
warren=${1:?warren binary}
perf=${2:?warren-perf binary}
messages=${3:?messages}
queues=${4:-10}
node=${5:-1}
here=$(cd "$(dirname "$0")" && pwd)
dir=${WARREN_CLUSTER_DIR:-/tmp/warren-cluster3}
"$here/cluster3.sh" start "$warren" >/dev/null
trap '"$here/cluster3.sh" stop' EXIT
api=http://127.0.0.$node:15672/api
per_queue=$((messages / queues))
start=$(date +%s.%N)
"$perf" --uri "amqp://guest:guest@127.0.0.1:5672/%2f" -u restart-qq --queues "$queues" \
    --durable --keep --queue-arg x-queue-type=quorum -x "$queues" -y 0 \
    -C "$per_queue" -s 16 -f persistent -c 1000 -z 600 >/dev/null
filled=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
total() {
    curl -sf -u guest:guest "$1/queues/%2f?columns=name,messages" 2>/dev/null |
        grep -o '"messages":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}
# Every node has applied the last publishes (followers a moment after the leader).
for _ in $(seq 1 300); do
    [ "$(total "$api")" -ge "$messages" ] && break
    sleep 0.1
done
echo "filled $(total "$api") messages into $queues quorum queues in $filled s"
pid=$(cat "$dir/n$node/pid")
mapfile -d '' argv <"/proc/$pid/cmdline"
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
du=$(du -sm "$dir/n$node" | cut -f1)
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
t0=$(date +%s.%N)
"${argv[@]}" >>"$dir/n$node/log" 2>&1 &
echo $! >"$dir/n$node/pid"
since() { awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN {printf "%.2f", e - s}'; }
port=""
api_ready=""
for _ in $(seq 1 1200); do
    if [ -z "$port" ] && (exec 3<>"/dev/tcp/127.0.0.$node/5672") 2>/dev/null; then
        port=$(since)
    fi
    if [ -n "$port" ] && [ "$(total "$api")" -ge "$messages" ]; then
        api_ready=$(since)
        break
    fi
    sleep 0.05
done
got=""
for _ in $(seq 1 600); do
    if curl -sf -u guest:guest -X POST -H 'content-type: application/json' \
        -d '{"count":1,"ackmode":"reject_requeue_true","encoding":"auto"}' \
        "$api/queues/%2f/restart-qq-1/get" 2>/dev/null | grep -q '"payload"'; then
        got=$(since)
        break
    fi
    sleep 0.05
done
echo "node $node (RSS $((rss / 1024)) MiB, data $du MiB) killed and restarted: AMQP port" \
    "accepting after ${port:-never} s, all $messages messages listed after ${api_ready:-never} s," \
    "a get through it answered after ${got:-never} s (load $(cut -d' ' -f1 /proc/loadavg))"
