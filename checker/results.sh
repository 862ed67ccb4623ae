#!/usr/bin/env bash
# Runs mcp-cancel-check against this repository's example servers and the
# interop peers (tests/interop/, pinned there), and writes checker/RESULTS.md.
#
#   bash tests/interop/install.sh && bash checker/results.sh
#   bash checker/results.sh --check   # for CI: writes nothing; fails when a
#                                     # row's outcome counts differ from the
#                                     # page's, or this crate's rows fail a check
#
# Needs Linux (/proc, for the CPU-time and memory checks), node, the
# interop installs and `redis-server` (FastMCP's tasks on Redis: started
# here on a free loopback port, with no persistence, and stopped at the
# end). Each row's exact command is in the page it writes.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-write}"
# What `cargo test --workspace --all-features` builds (CI runs this after it:
# nothing is compiled again): every example, with every feature.
cargo build -q --workspace --all-features --examples --bins
CHECK="target/debug/mcp-cancel-check"
E="target/debug/examples"
I="tests/interop"
OUT="$(mktemp -d)"
REDIS_PID=""
cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$OUT"
}
trap cleanup EXIT
SLOW='slow seconds=1 interval_ms=50'
# This crate's servers run the task checks too (--tasks: the fixture tools).
TASK='slow_compute seconds=30'
EVERYTHING_SLOW='trigger-long-running-operation duration=1 steps=20'

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_port PORT: until something accepts on 127.0.0.1:PORT (at most 30 s).
wait_port() {
    for _ in $(seq 300); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

# quote ARGS…: the words as a reader would type them.
quote() {
    local out=() a
    for a in "$@"; do
        if [[ $a =~ [[:space:]] ]]; then out+=("'$a'"); else out+=("$a"); fi
    done
    echo "${out[*]}"
}

# Redis for FastMCP's tasks (Docket's Redis backend): one database per row.
command -v redis-server >/dev/null || { echo "results.sh needs redis-server (apt-get install redis-server)" >&2; exit 1; }
REDIS_PORT="$(free_port)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/redis.log" 2>&1 &
REDIS_PID=$!
wait_port "$REDIS_PORT"
REDIS="redis://127.0.0.1:$REDIS_PORT"

n=0
# Each row is of a KIND (set for the call: `KIND=ours row …`): `ours`, this
# crate's transports, which must pass every check; `varies`, a server whose
# outcomes change from run to run (a race in its own loop: see the page's
# note), compared in --check only by what ran; otherwise `peer`.
kind() {
    local k="${KIND:-peer}"
    echo "$k" >"$OUT/$n.kind"
}

# row LABEL VERSION -- checker arguments (stdio)
row() {
    local label="$1" version="$2"
    shift 3
    n=$((n + 1))
    echo "== $label" >&2
    local shown
    shown="$(quote "$@")"
    # The page shows REDIS_PORT where the run had Redis's free port.
    shown="${shown//$REDIS/redis://127.0.0.1:\$REDIS_PORT}"
    printf '%s\t%s\t%s\n' "$label" "$version" "mcp-cancel-check $shown" >"$OUT/$n.meta"
    kind
    "$CHECK" --json --quiet "$@" >"$OUT/$n.json" 2>"$OUT/$n.err" || true
}

# http_row LABEL VERSION SLOW-SPEC [TASK-SPEC] -- server command (PORT in it is replaced)
http_row() {
    local label="$1" version="$2" slow="$3" task=()
    shift 3
    if [ "$1" != -- ]; then task=(--task "$1"); shift; fi
    shift
    local port
    port="$(free_port)"
    local cmd=("${@//PORT/$port}")
    env PORT="$port" "${cmd[@]}" >/dev/null 2>&1 &
    local pid=$!
    wait_port "$port"
    n=$((n + 1))
    echo "== $label" >&2
    # The page shows PORT where the run had a free port.
    local shown=("${@//PORT/\$PORT}")
    shown=("${shown[@]//$REDIS/redis://127.0.0.1:\$REDIS_PORT}")
    local shown_task="${task[1]:+ --task '${task[1]}'}"
    printf '%s\t%s\t%s\n' "$label" "$version" "PORT=\$PORT ${shown[*]} & mcp-cancel-check --slow '$slow'$shown_task --url http://127.0.0.1:\$PORT/mcp --pid \$!" >"$OUT/$n.meta"
    kind
    "$CHECK" --json --quiet --slow "$slow" "${task[@]}" --url "http://127.0.0.1:$port/mcp" --pid "$pid" >"$OUT/$n.json" 2>"$OUT/$n.err" || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

KIND=ours row "tower-mcp-cancel examples/stdio_server" "0.1.0" -- --slow "$SLOW" --task "$TASK" -- "$E/stdio_server" --tasks --task-ttl 2s
KIND=ours http_row "tower-mcp-cancel examples/http_server" "0.1.0" "$SLOW" "$TASK" -- "$E/http_server" --listen 127.0.0.1:PORT --tasks --task-ttl 2s
KIND=ours row "rmcp + tower-mcp-cancel-rmcp (rmcp_server)" "rmcp 3.11" -- --slow "$SLOW" -- "$E/rmcp_server"
KIND=ours row "rmcp + tower-mcp-cancel-rmcp (rmcp_server), 2025 handshake" "rmcp 3.11" -- --era 2025 --slow "$SLOW" -- "$E/rmcp_server"
row "rmcp alone (rmcp_server --plain)" "rmcp 3.11" -- --slow "$SLOW" -- "$E/rmcp_server" --plain
row "rmcp alone (rmcp_server --plain), 2025 handshake" "rmcp 3.11" -- --era 2025 --slow "$SLOW" -- "$E/rmcp_server" --plain
KIND=ours http_row "rmcp + tower-mcp-cancel-rmcp (rmcp_server --listen)" "rmcp 3.11" "$SLOW" -- "$E/rmcp_server" --listen 127.0.0.1:PORT
http_row "rmcp alone (rmcp_server --plain --listen)" "rmcp 3.11" "$SLOW" -- "$E/rmcp_server" --plain --listen 127.0.0.1:PORT
# The integration's tasks (its TasksLayer), and rmcp's own TaskManager.
KIND=ours row "rmcp + tower-mcp-cancel-rmcp (rmcp_server --tasks)" "rmcp 3.11" -- --slow "$SLOW" --task "$TASK" -- "$E/rmcp_server" --tasks --task-ttl 2s
KIND=ours http_row "rmcp + tower-mcp-cancel-rmcp (rmcp_server --tasks --listen)" "rmcp 3.11" "$SLOW" "$TASK" -- "$E/rmcp_server" --tasks --task-ttl 2s --listen 127.0.0.1:PORT
row "rmcp alone, its TaskManager (rmcp_server --plain --tasks)" "rmcp 3.11" -- --slow "$SLOW" --task "$TASK" -- "$E/rmcp_server" --plain --tasks
http_row "rmcp alone, its TaskManager (rmcp_server --plain --tasks --listen)" "rmcp 3.11" "$SLOW" "$TASK" -- "$E/rmcp_server" --plain --tasks --listen 127.0.0.1:PORT
# The tower-mcp integration serves with this crate's own servers
# (McpRouterService): its rows are this crate's, held to 0 failed; tower-mcp
# alone (--plain) races in its own stdio loop (†).
KIND=ours row "tower-mcp + tower-mcp-cancel-tower-mcp (tower_mcp_server)" "tower-mcp 0.25" -- --slow "$SLOW" -- "$E/tower_mcp_server"
KIND=ours row "tower-mcp + tower-mcp-cancel-tower-mcp (tower_mcp_server), 2025 handshake" "tower-mcp 0.25" -- --era 2025 --slow "$SLOW" -- "$E/tower_mcp_server"
KIND=varies row "tower-mcp alone (tower_mcp_server --plain)" "tower-mcp 0.25" -- --slow "$SLOW" -- "$E/tower_mcp_server" --plain
KIND=varies row "tower-mcp alone (tower_mcp_server --plain), 2025 handshake" "tower-mcp 0.25" -- --era 2025 --slow "$SLOW" -- "$E/tower_mcp_server" --plain
KIND=ours http_row "tower-mcp + tower-mcp-cancel-tower-mcp (tower_mcp_server --listen)" "tower-mcp 0.25" "$SLOW" -- "$E/tower_mcp_server" --listen 127.0.0.1:PORT
http_row "tower-mcp alone (tower_mcp_server --plain --listen)" "tower-mcp 0.25" "$SLOW" -- "$E/tower_mcp_server" --plain --listen 127.0.0.1:PORT
KIND=ours row "tower-mcp + tower-mcp-cancel-tower-mcp (tower_mcp_server --tasks)" "tower-mcp 0.25" -- --slow "$SLOW" --task "$TASK" -- "$E/tower_mcp_server" --tasks --task-ttl 2s
KIND=ours http_row "tower-mcp + tower-mcp-cancel-tower-mcp (tower_mcp_server --tasks --listen)" "tower-mcp 0.25" "$SLOW" "$TASK" -- "$E/tower_mcp_server" --tasks --task-ttl 2s --listen 127.0.0.1:PORT
row "TypeScript SDK v2 (ts/server.mjs)" "@modelcontextprotocol/server 2.4.0" -- --slow "$SLOW" -- node "$I/ts/server.mjs"
http_row "TypeScript SDK v2 (ts/server.mjs --http)" "@modelcontextprotocol/server 2.4.0" "$SLOW" -- node "$I/ts/server.mjs" --http PORT
row "Python SDK (py/server.py)" "mcp 2.3.0" -- --slow "$SLOW" -- "$I/.venv/bin/python" "$I/py/server.py"
http_row "Python SDK (py/server.py --http)" "mcp 2.3.0" "$SLOW" -- "$I/.venv/bin/python" "$I/py/server.py" --http PORT
http_row "Python SDK, 2025 path (py/legacy_server.py)" "mcp 2.3.0" "$SLOW" -- "$I/.venv/bin/python" "$I/py/legacy_server.py" PORT
FASTMCP="fastmcp 4.1.8, fastmcp-tasks 4.1.8"
row "FastMCP, tasks in memory (py/fastmcp_server.py)" "$FASTMCP" -- --slow "$SLOW" --task "$TASK" -- "$I/.venv/bin/python" "$I/py/fastmcp_server.py"
row "FastMCP, tasks on Redis (py/fastmcp_server.py)" "$FASTMCP" -- --slow "$SLOW" --task "$TASK" -- "$I/.venv/bin/python" "$I/py/fastmcp_server.py" --tasks-url "$REDIS/0"
http_row "FastMCP, tasks in memory (py/fastmcp_server.py --http)" "$FASTMCP" "$SLOW" "$TASK" -- "$I/.venv/bin/python" "$I/py/fastmcp_server.py" --http PORT
http_row "FastMCP, tasks on Redis (py/fastmcp_server.py --http)" "$FASTMCP" "$SLOW" "$TASK" -- "$I/.venv/bin/python" "$I/py/fastmcp_server.py" --tasks-url "$REDIS/1" --http PORT
row "server-everything (TypeScript SDK v1), stdio" "server-everything 2026.8.31" -- --slow "$EVERYTHING_SLOW" -- node "$I/node_modules/@modelcontextprotocol/server-everything/dist/index.js" stdio
http_row "server-everything (TypeScript SDK v1), streamableHttp" "server-everything 2026.8.31" "$EVERYTHING_SLOW" -- node "$I/node_modules/@modelcontextprotocol/server-everything/dist/index.js" streamableHttp

python3 - "$OUT" "$n" >"$OUT/RESULTS.md" <<'PY'
import json, sys, os
out, n = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(1, n + 1):
    label, version, cmd = open(f"{out}/{i}.meta").read().rstrip("\n").split("\t")
    kind = open(f"{out}/{i}.kind").read().strip()
    if kind == "varies":
        label += " †"
    if kind == "ours":
        open(f"{out}/ours.txt", "a").write(label + "\n")
    try:
        report = json.load(open(f"{out}/{i}.json"))
    except Exception:
        err = open(f"{out}/{i}.err").read().strip().splitlines()
        report = {"target": "(could not run: " + (err[-1] if err else "no output") + ")", "checks": []}
    rows.append((label, version, cmd, report))
print("# mcp-cancel-check: results\n")
print("Generated by `bash checker/results.sh` (after `bash tests/interop/install.sh`), on Linux;")
print("the peers are the ones pinned in `tests/interop/`. A failed SHOULD does not fail a run")
print("without `--strict`. Each failure's detail is what the checker measured, i.e. what a user")
print("of that server sees. Each row is judged by the revision its session negotiated: a")
print("2025 row by the 2025 pages (there, an answer or progress after a cancel breaks a SHOULD,")
print("not stdio's 2026-07-28 MUST NOT).\n")
print("| server | version | transport, era | pass (of which weak) | fail (MUST / SHOULD) | skip |")
print("| --- | --- | --- | --- | --- | --- |")
for label, version, cmd, r in rows:
    c = r["checks"]
    count = lambda o: sum(1 for x in c if x["outcome"] == o)
    fm = sum(1 for x in c if x["outcome"] == "fail" and x["level"] == "MUST")
    fs = sum(1 for x in c if x["outcome"] == "fail" and x["level"] == "SHOULD")
    weak = sum(1 for x in c if x["outcome"] == "pass" and x["evidence"] == "weak")
    target = r["target"]
    era = target.rsplit(", ", 1)[1] if ", " in target else ""
    where = "stdio" if target.startswith("stdio") else "Streamable HTTP" if target.startswith("Streamable") else target
    print(f"| {label} | {version} | {where}, {era} | {count('pass')} ({weak}) | {fm} / {fs} | {count('skip')} |")
print("\n† Outcomes that vary from run to run: a race in the server's own loop (see its")
print("failures below); CI compares only that such a row ran, on the same transport and era.")
print("\n## Failures, and what a user sees\n")
for label, version, cmd, r in rows:
    fails = [x for x in r["checks"] if x["outcome"] == "fail"]
    if not fails:
        continue
    print(f"### {label}\n")
    for x in fails:
        detail = x["detail"].replace("|", "\\|")
        print(f"- `{x['id']}` ({x['level']}, {x['rule']}): {detail}")
    print()
print("## Skipped, and why\n")
for label, version, cmd, r in rows:
    skips = [x for x in r["checks"] if x["outcome"] == "skip"]
    if skips:
        why = {}
        for x in skips:
            why.setdefault(x["detail"], []).append(f"`{x['id']}`")
        print(f"- {label}: " + "; ".join(f"{', '.join(ids)}: {d}" for d, ids in why.items()))
print()
print("## Commands\n")
print("From the repository's root, `mcp-cancel-check` being `target/debug/mcp-cancel-check`;")
print("`PORT` is any free port; `REDIS_PORT` that of a `redis-server --port $REDIS_PORT --save ''`")
print("started for the run (FastMCP's Redis rows).\n")
for label, version, cmd, r in rows:
    print(f"- {label}: `{cmd}`")
PY
if [ "$MODE" != --check ]; then
    cp "$OUT/RESULTS.md" checker/RESULTS.md
    echo "wrote checker/RESULTS.md" >&2
    exit 0
fi
# The summary rows (server, version, transport, counts), as checked in and as
# now; of a row whose outcomes vary (†), its server, version and transport.
rows() { grep -E '^\| [^-]' "$1" | tail -n +2 | awk -F' \\| ' '/†/ { print $1 " | " $2 " | " $3; next } { print }'; }
if ! diff <(rows checker/RESULTS.md) <(rows "$OUT/RESULTS.md") >&2; then
    sed -n '/^## Failures/,/^## Commands/p' "$OUT/RESULTS.md" >&2
    echo "checker/RESULTS.md: a row changed (above: < checked in, > now); rerun bash checker/results.sh and review" >&2
    exit 1
fi
# This crate's transports (KIND=ours) pass every check.
if rows "$OUT/RESULTS.md" | grep -F -f <(sed 's/^/| /; s/$/ |/' "$OUT/ours.txt") | grep -vq '| 0 / 0 |'; then
    echo "this crate's own example servers fail a check: see the failures above" >&2
    exit 1
fi
echo "checker/RESULTS.md: every row as checked in" >&2
