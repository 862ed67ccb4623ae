#!/usr/bin/env bash
# CPU time and write system calls per request of HTTP servers under figure
# 8's load (BENCHMARKS.md), in interleaved rounds, without a profiler:
#
#   bash benchmarks/http_cpu.sh 1.1|2 ROUNDS SERVER...
#
# Each SERVER is started with `--listen 127.0.0.1:0` (it prints `listening on
# URL`), warmed with 20 000 echo calls from h2load, then driven with 100 000;
# the server's utime + stime (/proc/PID/stat) and its write system calls
# (`syscw` of /proc/PID/io) over those are divided by the requests. Prints the
# median of the rounds per server (and the range).
set -euo pipefail
proto=$1; rounds=$2; shift 2
n=100000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"h2load","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}' > "$tmp/body.json"
if [[ "$proto" == "1.1" ]]; then load=(--h1 -c 64 -m 1); else load=(-c 4 -m 16); fi
drive() {
    h2load "${load[@]}" -t 1 -n "$2" -d "$tmp/body.json" \
        -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
        -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo' \
        "$1" > /dev/null
}
one() {
    RUST_LOG=warn "$1" --listen 127.0.0.1:0 > "$tmp/url" 2> /dev/null &
    local pid=$!
    for _ in $(seq 50); do grep -q listening "$tmp/url" 2> /dev/null && break; sleep 0.1; done
    local url; url=$(awk '{print $3}' "$tmp/url")
    drive "$url" 20000
    local t0 w0 t1 w1
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat"); w0=$(awk '/syscw/ {print $2}' "/proc/$pid/io")
    drive "$url" "$n"
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat"); w1=$(awk '/syscw/ {print $2}' "/proc/$pid/io")
    kill "$pid"; wait "$pid" 2> /dev/null || true
    local hz; hz=$(getconf CLK_TCK)
    echo "$1 $(( (t1 - t0) * 1000000 / hz )) $(( w1 - w0 ))"
}
for _ in $(seq "$rounds"); do for s in "$@"; do one "$s"; done; done > "$tmp/runs"
python3 - "$tmp/runs" "$n" "$proto" <<'PY'
import collections, statistics, sys
cpu = collections.defaultdict(list); writes = collections.defaultdict(list)
n = int(sys.argv[2])
for line in open(sys.argv[1]):
    name, us, w = line.split()
    cpu[name].append(int(us) / n); writes[name].append(int(w) / n)
for name in cpu:
    c = cpu[name]
    print(f"HTTP/{sys.argv[3]} {name}: CPU {statistics.median(c):.2f} µs per request "
          f"({min(c):.2f}-{max(c):.2f}), {statistics.median(writes[name]):.3f} writes per request")
PY
