#!/usr/bin/env bash
# Idle cost of QUEUES quorum queues on a 3-node cluster (issue 16's "1,000 idle quorum
# queues" target): the queues are declared through node 1's HTTP API (8 at a time, each a
# 3-member group), then, 10 s after the last declaration, each node's utime+stime from /proc
# over 30 s and its RSS growth since before the declarations, per queue.
# docs/benchmarks.md, "Idle quorum queues".
#
#   scripts/bench-idle-quorum.sh WARREN QUEUES
#
# Uses scripts/cluster3.sh (127.0.0.1-3, AMQP 5672, HTTP 15672; check nothing else listens
# there first) and stops the cluster at the end.
set -euo pipefail
warren=${1:?warren binary}
queues=${2:?queues}
here=$(cd "$(dirname "$0")" && pwd)
"$here/cluster3.sh" start "$warren" >/dev/null
trap '"$here/cluster3.sh" stop' EXIT
read -r -a pids <<<"$("$here/cluster3.sh" pids)"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sleep 3
rss_before=()
for pid in "${pids[@]}"; do rss_before+=("$(rss "$pid")"); done
start=$(date +%s.%N)
seq 1 "$queues" | xargs -P 8 -I{} curl -sf -o /dev/null -u guest:guest -X PUT \
    -H 'content-type: application/json' \
    -d '{"durable":true,"arguments":{"x-queue-type":"quorum"}}' \
    "http://127.0.0.1:15672/api/queues/%2f/idle-qq-{}"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
listed=$(curl -sf -u guest:guest "http://127.0.0.3:15672/api/queues/%2f?columns=name,type" |
    grep -o '"type":"quorum"' | wc -l)
echo "declared $queues quorum queues through node 1 in $took s; node 3 lists $listed"
sleep 10
ticks=$(getconf CLK_TCK)
before=()
for pid in "${pids[@]}"; do before+=("$(cpu "$pid")"); done
sleep 30
line="idle 30 s with $queues quorum queues:"
for i in 0 1 2; do
    line+=$(awk -v b="${before[$i]}" -v a="$(cpu "${pids[$i]}")" -v t="$ticks" \
        -v r0="${rss_before[$i]}" -v r1="$(rss "${pids[$i]}")" -v q="$queues" \
        'BEGIN {printf " n%d %.1f%% cpu, rss %d->%d MiB (%.1f KiB/queue);", '"$((i + 1))"',
            (a - b) * 100 / t / 30, r0 / 1024, r1 / 1024, (r1 - r0) / q}')
done
echo "$line (load $(cut -d' ' -f1 /proc/loadavg))"
