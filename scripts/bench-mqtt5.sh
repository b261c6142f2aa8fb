#!/usr/bin/env bash
# MQTT 5.0 figures of Warren against Mosquitto 2.0 in the same run (warren-perf --mqtt5):
# idle connections (one QoS 1 subscription each; MQTT 3.1.1 and Web-MQTT on Warren too),
# then QoS 1 one-to-one and paced QoS 0 fan-in from 200 publishers, the two brokers driven
# alternately round by round. Both brokers are started here on 127.0.0.1 (Warren on port 0
# with a fresh data_dir, Mosquitto from a generated config), each afresh for its idle run.
# Needs release builds of warren and warren-perf, and `mosquitto` (apt-get install mosquitto).
# Usage: scripts/bench-mqtt5.sh [seconds] [idle-connections] [fan-in rate] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-6}
idle=${2:-10000}
rate=${3:-150000}
rounds=${4:-3}
perf=target/release/warren-perf
ulimit -n "$(ulimit -Hn)" || true
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

start_warren() { # sets warren_pid, warren_mqtt
  local log=$work/warren.log data=$work/warren-data-$RANDOM
  target/release/warren --set data_dir="$data" --set listeners.tcp.default=127.0.0.1:0 \
    --set mqtt.listeners.tcp.default=127.0.0.1:0 --set stomp.listeners.tcp.default=127.0.0.1:0 \
    --set stream.listeners.tcp.default=127.0.0.1:0 --set management.tcp.ip=127.0.0.1 \
    --set management.tcp.port=0 --set prometheus.tcp.ip=127.0.0.1 --set prometheus.tcp.port=0 \
    --set web_mqtt.tcp.ip=127.0.0.1 --set web_mqtt.tcp.port=0 2>"$log" &
  warren_pid=$!
  pids+=("$warren_pid")
  for _ in $(seq 100); do grep -q 'listening protocol=mqtt ' "$log" && break; sleep 0.1; done
  for _ in $(seq 100); do grep -q 'listening protocol=web-mqtt ' "$log" && break; sleep 0.1; done
  warren_mqtt=$(grep -o 'protocol=mqtt addr=[0-9.]*:[0-9]*' "$log" | head -1 | sed 's/.*://')
  warren_web_mqtt=$(grep -o 'protocol=web-mqtt addr=[0-9.]*:[0-9]*' "$log" | head -1 | sed 's/.*://')
}

start_mosquitto() { # sets mosquitto_pid, mosquitto_port
  mosquitto_port=$(( 20000 + RANDOM % 20000 ))
  printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$mosquitto_port" >"$work/mosquitto.conf"
  mosquitto -c "$work/mosquitto.conf" 2>"$work/mosquitto.log" &
  mosquitto_pid=$!
  pids+=("$mosquitto_pid")
  sleep 0.5
}

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

run() { # broker, name, extra args...
  local broker=$1 name=$2; shift 2
  local port pid
  case $broker in
    warren) port=$warren_mqtt; pid=$warren_pid ;;
    warren-web) port=$warren_web_mqtt; pid=$warren_pid ;;
    *) port=$mosquitto_port; pid=$mosquitto_pid ;;
  esac
  echo "== $name / $broker: warren-perf $* -z $seconds"
  $perf --uri "mqtt://guest:guest@127.0.0.1:$port" --broker-pid "$pid" -z "$seconds" "$@" 2>&1 \
    | grep -E 'summary|broker rss|broker cpu|opened|window' | tail -4
}

idle_args=(--mqtt-idle "$idle" --source-addrs 8 --handshake-batch 200)
start_warren
run warren "idle MQTT 5 connections" --mqtt5 "${idle_args[@]}"
stop "$warren_pid"
start_warren
run warren "idle MQTT 3.1.1 connections" "${idle_args[@]}"
stop "$warren_pid"
start_warren
run warren-web "idle Web-MQTT (MQTT 5 over WebSocket) connections" --mqtt5 "${idle_args[@]}" \
  --websocket /ws
stop "$warren_pid"
start_mosquitto
run mosquitto "idle MQTT 5 connections" --mqtt5 "${idle_args[@]}"
stop "$mosquitto_pid"

start_warren
start_mosquitto
for round in $(seq "$rounds"); do
  for broker in warren mosquitto; do
    run "$broker" "QoS 1 one-to-one (round $round)" --mqtt5 --mqtt-qos1 -s 16
  done
  # The same in-flight window on both: Mosquitto's receive maximum (20 by default).
  for broker in warren mosquitto; do
    run "$broker" "QoS 1 one-to-one, window 20 (round $round)" --mqtt5 --mqtt-qos1 -c 20 -s 16
  done
  for broker in warren mosquitto; do
    run "$broker" "QoS 0 fan-in, 200 publishers at $rate msg/s (round $round)" \
      --mqtt5 --mqtt-fan-in -x 200 -s 64 -r "$rate" --source-addrs 4
  done
done
