#!/usr/bin/env python3
"""`/api/queues` with many queues, against one or more running brokers (docs/benchmarks.md,
"/api/queues with 10,000 queues"): declares QUEUES queues with PUT over one keep-alive
connection, then times ROUNDS full `GET /api/queues` and ROUNDS paged requests
(`?page=1&page_size=100&sort=messages`, what the web UI asks for), each on a fresh
connection, and prints the medians. Brokers are given as HOST:PORT of their management
listener; runs go round-robin so that a shared machine's noise falls on all of them.

    scripts/bench-api-queues.py QUEUES ROUNDS HOST:PORT [HOST:PORT ...]
"""
import base64
import http.client
import statistics
import sys
import time

AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def declare(addr, queues):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port))
    start = time.perf_counter()
    for i in range(queues):
        conn.request("PUT", f"/api/queues/%2F/perf.{i:05}", body='{"durable":false}',
                     headers={**AUTH, "content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status in (201, 204), response.status
    return queues / (time.perf_counter() - start)


def timed_get(addr, path):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port))
    start = time.perf_counter()
    conn.request("GET", path, headers=AUTH)
    response = conn.getresponse()
    body = response.read()
    took = time.perf_counter() - start
    assert response.status == 200, response.status
    conn.close()
    return took * 1000, len(body)


def main():
    queues, rounds, addrs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    for addr in addrs:
        print(f"{addr}: {declare(addr, queues):,.0f} declarations/s")
    full = {a: [] for a in addrs}
    paged = {a: [] for a in addrs}
    size = {}
    for _ in range(rounds):
        for addr in addrs:
            took, size[addr] = timed_get(addr, "/api/queues")
            full[addr].append(took)
            took, _ = timed_get(addr, "/api/queues?page=1&page_size=100&sort=messages")
            paged[addr].append(took)
    for addr in addrs:
        f, p = full[addr], paged[addr]
        print(f"{addr}: GET /api/queues ({size[addr] / 1e6:.1f} MB) median {statistics.median(f):.0f} ms "
              f"({min(f):.0f}-{max(f):.0f}), paged median {statistics.median(p):.0f} ms "
              f"({min(p):.0f}-{max(p):.0f})")


main()
