#!/usr/bin/env bash
# Starts or stops three `warren` nodes on 127.0.0.1, 127.0.0.2 and 127.0.0.3 for benchmarks
# and manual tests (the interop tests start their own).
#
#   scripts/cluster3.sh start [WARREN_BINARY] [EXTRA --set ARGS...]
#   scripts/cluster3.sh stop
#   scripts/cluster3.sh pids          # "PID1 PID2 PID3", for warren-perf --broker-pid / /proc
#
# Node N listens on 127.0.0.N with the usual ports: AMQP 5672, MQTT 1883, STOMP 61613,
# management 15672, cluster 45690; stream and Prometheus listeners pick free ports. Data and
# logs go under ${WARREN_CLUSTER_DIR:-/tmp/warren-cluster3}/nN (wiped by `start`).
set -euo pipefail
dir=${WARREN_CLUSTER_DIR:-/tmp/warren-cluster3}
cmd=${1:-}
case "$cmd" in
start)
    shift
    bin=${1:-target/release/warren}
    [ $# -gt 0 ] && shift
    "$0" stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    mkdir -p "$dir"
    head -c 32 /dev/urandom >"$dir/cluster.secret"
    chmod 600 "$dir/cluster.secret"
    for n in 1 2 3; do
        host=127.0.0.$n
        mkdir -p "$dir/n$n"
        "$bin" \
            --set node_name=warren@$host \
            --set data_dir="$dir/n$n" \
            --set cluster.secret_file="$dir/cluster.secret" \
            --set cluster.listeners.tcp.default=$host:45690 \
            --set cluster_formation.classic_config.nodes.1=warren@127.0.0.1:45690 \
            --set cluster_formation.classic_config.nodes.2=warren@127.0.0.2:45690 \
            --set cluster_formation.classic_config.nodes.3=warren@127.0.0.3:45690 \
            --set listeners.tcp.default=$host:5672 \
            --set mqtt.listeners.tcp.default=$host:1883 \
            --set stomp.listeners.tcp.default=$host:61613 \
            --set stream.listeners.tcp.default=$host:0 \
            --set management.tcp.ip=$host \
            --set management.tcp.port=15672 \
            --set prometheus.tcp.ip=$host \
            --set prometheus.tcp.port=0 \
            "$@" >"$dir/n$n/log" 2>&1 &
        echo $! >"$dir/n$n/pid"
    done
    # Ready when every node's management API lists three running nodes.
    for _ in $(seq 1 100); do
        ok=0
        for n in 1 2 3; do
            running=$(curl -s -u guest:guest http://127.0.0.$n:15672/api/nodes 2>/dev/null |
                grep -o '"running":true' | wc -l || true)
            [ "$running" = 3 ] && ok=$((ok + 1))
        done
        if [ $ok = 3 ]; then
            echo "cluster up: $("$0" pids)"
            exit 0
        fi
        sleep 0.2
    done
    echo "cluster did not form in 20 s; logs in $dir/n*/log" >&2
    exit 1
    ;;
stop)
    for n in 1 2 3; do
        [ -f "$dir/n$n/pid" ] && kill "$(cat "$dir/n$n/pid")" 2>/dev/null || true
    done
    ;;
pids)
    echo "$(cat "$dir/n1/pid") $(cat "$dir/n2/pid") $(cat "$dir/n3/pid")"
    ;;
*)
    echo "usage: $0 start [WARREN_BINARY] [--set K=V ...] | stop | pids" >&2
    exit 2
    ;;
esac
