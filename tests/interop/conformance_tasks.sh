#!/usr/bin/env bash
# Runs the official MCP conformance suite's server `tasks-*` scenarios (SEP-2663, the tasks
# extension) against a server over Streamable HTTP: a URL, or a command this script starts.
#
#   bash tests/interop/conformance_tasks.sh URL
#   bash tests/interop/conformance_tasks.sh -- COMMAND [ARGS...]   # prints "listening on URL"
#
#   bash tests/interop/install.sh   # first: installs the suite (pinned in package.json)
#   bash tests/interop/conformance_tasks.sh -- target/debug/examples/http_server --listen 127.0.0.1:0 --tasks
#
# The suite is npm's @modelcontextprotocol/conformance@0.2.0-alpha.11 (the release of upstream
# commit c321dd3), installed with the other interop peers by tests/interop/install.sh, exact in
# package.json and package-lock.json. Nothing outside this repository is named: the CLI is
# tests/interop/node_modules/@modelcontextprotocol/conformance/dist/index.js, run by node.
#
# With a COMMAND, the script starts it and reads its stdout until a line `listening on URL` (what
# this project's example servers print, with the port bound: `--listen 127.0.0.1:0` takes a free
# port from the OS, so no other server started meanwhile can take it first); at most 60 s, and
# not past the command's exit. It runs the scenarios against that URL, then stops the command
# (SIGTERM). The command's output goes to server.log in the results directory (its end is shown
# after a failure).
#
# What it runs: each server scenario whose name starts with `tasks-` (the suite's `list --server`;
# ten in alpha.11), one `server --url URL --scenario NAME -o DIR` each, with the suite's own output
# shown. The suite speaks 2026-07-28 on the stateless wire. Then conformance/summary.mjs reads every
# checks.json and prints one line per scenario and a total; it also names the check that cancels a
# running `slow_compute` task (tasks-lifecycle's sep-2663-cancel-ack-empty-result: the status must
# settle to `cancelled`).
#
# Two carve-outs for defects of the published alpha.11, each as narrow as the defect:
#   - Node 20: the CLI imports `globSync` by name from 'fs' (Node >= 22), a link-time SyntaxError
#     that kills every command. conformance/register.mjs (node --import) gives that one module an
#     'fs' with a globSync stub, on a Node without fs.globSync only; see its comments.
#   - Upstream issue #424 (fixed after c321dd3 by PR #468): the synthetic `wire-schema-valid` check
#     validates a tools/call answer against the core CallToolResult schema even when it is a
#     SEP-2663 CreateTaskResult (`resultType: "task"`, no `content`). summary.mjs sets a violation
#     aside as #424 only when ALL of: its origin is the implementation, it answers a tools/call, the
#     answered `result.resultType` is "task", and every schema error names the CallToolResult result
#     type. Those are listed under their own heading and not counted; a `wire-schema-valid` failure
#     with any other violation is a failure, with those violations printed.
#
# Exit status: 0 when every check is SUCCESS, SKIPPED, INFO or WARNING (after the #424 carve-out)
# and the cancelled slow_compute settled `cancelled`; 1 otherwise; 2 on a usage or setup error
# (suite not installed, wrong version, server not listening).
#
# Env: CONFORMANCE_SCENARIOS (space-separated subset), CONFORMANCE_RESULTS (keep results in this
# directory; default: a temporary one, removed at the end unless KEEP=1), CONFORMANCE_VERBOSE=1
# (the suite's --verbose). Needs: node >= 20, and the install above.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PIN=0.2.0-alpha.11
PKG="$HERE/node_modules/@modelcontextprotocol/conformance"

usage() { sed -n '5,6p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
SERVER=()
if [ "$1" = -- ]; then
    shift
    [ $# -ge 1 ] || usage
    SERVER=("$@")
else
    [ $# -eq 1 ] || usage
    URL="$1"
fi

if [ ! -f "$PKG/dist/index.js" ]; then
    echo "conformance_tasks: the suite is not installed; run: bash tests/interop/install.sh" >&2
    exit 2
fi
installed="$(node -p "require(process.argv[1]).version" "$PKG/package.json")"
if [ "$installed" != "$PIN" ]; then
    echo "conformance_tasks: @modelcontextprotocol/conformance $installed installed, $PIN expected; run: bash tests/interop/install.sh" >&2
    exit 2
fi
conformance() { node --import "$HERE/conformance/register.mjs" "$PKG/dist/index.js" "$@"; }

if [ -n "${CONFORMANCE_RESULTS:-}" ]; then
    RESULTS="$CONFORMANCE_RESULTS"
    mkdir -p "$RESULTS"
else
    RESULTS="$(mktemp -d -t mcp-conformance-tasks.XXXXXX)"
fi
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -z "${CONFORMANCE_RESULTS:-}" ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$RESULTS"; fi
}
trap cleanup EXIT

if [ ${#SERVER[@]} -gt 0 ]; then
    echo "conformance_tasks: starting ${SERVER[*]}"
    log="$RESULTS/server.log"
    : >"$log"
    # Its stdout comes through a pipe read here; its stderr goes to the log. $! is the command
    # itself (exec), stopped by cleanup.
    exec {server_out}< <(exec "${SERVER[@]}" 2>>"$log")
    server_pid=$!
    URL=
    deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ] && IFS= read -r -t "$((deadline - SECONDS))" -u "$server_out" line; do
        printf '%s\n' "$line" >>"$log"
        if [[ $line =~ ^listening\ on\ (http://[^[:space:]]+) ]]; then
            URL="${BASH_REMATCH[1]}"
            break
        fi
    done
    if [ -z "$URL" ]; then
        echo "conformance_tasks: the server printed no 'listening on URL' line (within 60 s, before it exited); its output:" >&2
        tail -n 40 "$log" >&2
        exit 2
    fi
    # The rest of its stdout, to the log (a full pipe would block the server).
    cat <&"$server_out" >>"$log" &
fi

if [ -n "${CONFORMANCE_SCENARIOS:-}" ]; then
    read -r -a SCENARIOS <<<"$CONFORMANCE_SCENARIOS"
else
    mapfile -t SCENARIOS < <(conformance list --server | sed -n 's/^[[:space:]]*-[[:space:]]*\(tasks-[^[:space:]]*\).*/\1/p')
fi
[ "${#SCENARIOS[@]}" -gt 0 ] || { echo "conformance_tasks: no tasks-* scenarios found" >&2; exit 2; }
echo "conformance_tasks: @modelcontextprotocol/conformance $installed, node $(node --version), ${#SCENARIOS[@]} scenarios against $URL"
for s in "${SCENARIOS[@]}"; do
    echo
    echo "################ $s ################"
    # The suite's exit status is not used: it counts the #424 false failures. The summary decides.
    conformance server --url "$URL" --scenario "$s" -o "$RESULTS/$s" ${CONFORMANCE_VERBOSE:+--verbose} || true
done

echo
echo "conformance_tasks: ${#SCENARIOS[@]} scenarios in ${SECONDS}s"
status=0
node "$HERE/conformance/summary.mjs" "$RESULTS" "${SCENARIOS[@]}" || status=$?
if [ "$status" != 0 ] && [ -n "$server_pid" ]; then
    echo
    echo "conformance_tasks: the server's output (last 40 lines of $RESULTS/server.log):"
    tail -n 40 "$RESULTS/server.log"
fi
exit "$status"
