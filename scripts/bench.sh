#!/usr/bin/env bash
# Runs warren-perf scenarios against Warren and against a RabbitMQ already running on
# 127.0.0.1:5672 (pid in $RABBIT_PID), side by side, and prints the summary lines.
# Usage: RABBIT_PID=$(pgrep -f beam.smp | head -1) scripts/bench.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
cargo build --release -p warren -p warren-perf >/dev/null 2>&1
perf=target/release/warren-perf
log=$(mktemp)
ulimit -n 65536 || true
target/release/warren --set listeners.tcp.default=127.0.0.1:0 --set loopback_users=none \
  --set mqtt.listeners.tcp.default=127.0.0.1:0 --set stomp.listeners.tcp.default=127.0.0.1:0 \
  --set management.tcp.port=0 --set prometheus.tcp.port=0 2>"$log" &
warren_pid=$!
trap 'kill $warren_pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q 'listening protocol=amqp' "$log" && break; sleep 0.1; done
warren_port=$(grep -o 'addr=[0-9.]*:[0-9]*' "$log" | head -1 | cut -d: -f2)

run() { # name, extra args...
  local name=$1; shift
  for broker in warren rabbitmq; do
    if [ $broker = warren ]; then uri="amqp://guest:guest@127.0.0.1:$warren_port/%2f"; pid=$warren_pid
    else uri="amqp://guest:guest@127.0.0.1:5672/%2f"; pid=$RABBIT_PID; fi
    echo "== $name / $broker: warren-perf $* -z $seconds"
    $perf --uri "$uri" --broker-pid "$pid" -z "$seconds" "$@" 2>&1 | grep -E 'summary|broker cpu|latency|connections' | tail -4
  done
}

run "1p1c autoack 16B" -x 1 -y 1 -a -s 16
run "1p1c manual ack qos200 confirms1000" -x 1 -y 1 -q 200 -c 1000 -s 16
run "fanout 10 queues 10 consumers" -x 1 -y 10 -t fanout --queues 10 -a -s 16
run "topic 1000 bindings" -x 1 -y 1 -t topic --topic-bindings 1000 -a -s 16
run "rpc one in flight" --rpc
run "connection churn" --churn -x 4
