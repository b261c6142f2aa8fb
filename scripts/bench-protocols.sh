#!/usr/bin/env bash
# Runs warren-perf's MQTT, STOMP and AMQP 1.0 scenarios against Warren, RabbitMQ 3.10 (MQTT
# plugin on 1883, STOMP plugin on 61613, AMQP 1.0 plugin on 5672 with v1 addresses; pid in
# $RABBIT_PID) and Mosquitto (port $MOSQUITTO_PORT, pid in
# $MOSQUITTO_PID; MQTT only), side by side, and prints the summary lines.
# Usage: RABBIT_PID=$(pgrep -f "beam.smp" | head -1) MOSQUITTO_PORT=1884 \
#        MOSQUITTO_PID=$(pgrep -x mosquitto) scripts/bench-protocols.sh [seconds] [idle-connections]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
idle=${2:-19000}
cargo build --release -p warren -p warren-perf >/dev/null 2>&1
perf=target/release/warren-perf
log=$(mktemp)
ulimit -n "$(ulimit -Hn)" || true
target/release/warren --set listeners.tcp.default=127.0.0.1:0 --set loopback_users=none \
  --set mqtt.listeners.tcp.default=127.0.0.1:0 --set stomp.listeners.tcp.default=127.0.0.1:0 \
  --set management.tcp.port=0 --set prometheus.tcp.port=0 \
  2>"$log" &
warren_pid=$!
trap 'kill $warren_pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q 'listening protocol=stomp' "$log" && break; sleep 0.1; done
port_of() { grep -o "protocol=$1 addr=[0-9.]*:[0-9]*" "$log" | head -1 | sed 's/.*://'; }
warren_mqtt=$(port_of mqtt)
warren_stomp=$(port_of stomp)
warren_amqp=$(port_of amqp)

mqtt() { # name, extra args...
  local name=$1; shift
  for broker in warren rabbitmq mosquitto; do
    case $broker in
      warren) port=$warren_mqtt; pid=$warren_pid ;;
      rabbitmq) port=1883; pid=$RABBIT_PID ;;
      mosquitto) port=${MOSQUITTO_PORT:-1884}; pid=${MOSQUITTO_PID:-} ;;
    esac
    [ -n "$pid" ] || continue
    echo "== $name / $broker: warren-perf $* -z $seconds"
    $perf --uri "mqtt://guest:guest@127.0.0.1:$port" --broker-pid "$pid" -z "$seconds" "$@" 2>&1 \
      | grep -E 'summary|broker rss|opened' | tail -3
  done
}

stomp() { # name, extra args...
  local name=$1; shift
  for broker in warren rabbitmq; do
    if [ $broker = warren ]; then port=$warren_stomp; pid=$warren_pid
    else port=61613; pid=$RABBIT_PID; fi
    echo "== $name / $broker: warren-perf $* -z $seconds"
    $perf --uri "stomp://guest:guest@127.0.0.1:$port/%2f" --broker-pid "$pid" -z "$seconds" "$@" 2>&1 \
      | grep -E 'summary' | tail -2
  done
}

amqp10() { # name, extra args... (RabbitMQ 3.10's plugin knows only v1 addresses)
  local name=$1; shift
  for round in 1 2 3; do
    for broker in warren rabbitmq; do
      if [ $broker = warren ]; then port=$warren_amqp; pid=$warren_pid; v1=
      else port=5672; pid=$RABBIT_PID; v1=--amqp10-address-v1; fi
      echo "== $name / $broker (round $round): warren-perf $* $v1 -z $seconds"
      $perf --uri "amqp10://guest:guest@127.0.0.1:$port/%2f" --broker-pid "$pid" -z "$seconds" \
        $v1 "$@" 2>&1 | grep -E 'summary' | tail -1
    done
  done
}

amqp10 "AMQP 1.0 queue, unsettled, credit 200" --amqp10-queue -u amqp10-perf -q 200 -c 1000
mqtt "MQTT QoS 0 fan-in, 200 publishers" --mqtt-fan-in -x 200
mqtt "MQTT QoS 1, 1 publisher 1 subscriber" --mqtt-qos1
stomp "STOMP /queue/, client-individual, prefetch 200" --stomp-queue -u stomp-perf -q 200
mqtt "MQTT $idle idle connections, one QoS 1 subscription each" --mqtt-idle "$idle" --source-addrs 8 --handshake-batch 200
