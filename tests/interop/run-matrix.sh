#!/usr/bin/env bash
# Self-test of the SDK peers: every SDK client driver against every SDK server, over stdio and
# Streamable HTTP on 127.0.0.1, every scenario. Each run is bounded by `timeout`.
#
#   bash tests/interop/run-matrix.sh [OUTDIR]        (default OUTDIR: a fresh mktemp -d)
#   env CLIENTS="ts py" SERVERS="ts py" TRANSPORTS="stdio http" SCENARIOS="..." to narrow it.
#
# Writes OUTDIR/<client>-<server>-<transport>-<scenario>.{json,stderr} (+ http-<server>.stderr) and
# ends with a plain "N passed, N failed" line. Exit status 0 only when every run passed.
# Requires install.sh to have run.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
OUT="${1:-$(mktemp -d -t mcp-interop-XXXXXX)}"
mkdir -p "$OUT"
PY="$HERE/.venv/bin/python"
CLIENTS="${CLIENTS:-ts py}"
SERVERS="${SERVERS:-ts py}"
TRANSPORTS="${TRANSPORTS:-stdio http}"
PER_RUN_TIMEOUT="${PER_RUN_TIMEOUT:-60}"

scenarios_for() { # client
  if [ -n "${SCENARIOS:-}" ]; then echo "$SCENARIOS"; return; fi
  case "$1" in
    ts) echo "basic timeout cancel progress progress_reset" ;;
    py) echo "basic timeout cancel progress" ;;
  esac
}
server_cmd() { # server
  case "$1" in
    ts) echo "node $HERE/ts/server.mjs" ;;
    py) echo "$PY $HERE/py/server.py" ;;
  esac
}
client_cmd() { # client
  case "$1" in
    ts) echo "node $HERE/ts/client.mjs" ;;
    py) echo "$PY $HERE/py/client.py" ;;
  esac
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

pass=0; fail=0; failed_runs=()
run_one() { # client server transport scenario target...
  local c="$1" s="$2" t="$3" sc="$4"; shift 4
  local base="$OUT/$c-$s-$t-$sc"
  # shellcheck disable=SC2046
  timeout "$PER_RUN_TIMEOUT" $(client_cmd "$c") "$sc" "$@" >"$base.json" 2>"$base.stderr"
  local rc=$?
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "PASS $c-client $s-server $t $sc"
  else fail=$((fail+1)); failed_runs+=("$c-$s-$t-$sc(rc=$rc)"); echo "FAIL $c-client $s-server $t $sc (rc=$rc) -> $base.json"; fi
}

for s in $SERVERS; do
  for t in $TRANSPORTS; do
    srv_pid=""
    if [ "$t" = http ]; then
      port="$(free_port)"
      : >"$OUT/http-$s.stderr"
      # shellcheck disable=SC2046
      timeout 900 $(server_cmd "$s") --http "$port" >"$OUT/http-$s.stdout" 2>>"$OUT/http-$s.stderr" &
      srv_pid=$!
      for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
      done
      target=(--url "http://127.0.0.1:$port/mcp")
    else
      # shellcheck disable=SC2206
      target=(-- $(server_cmd "$s"))
    fi
    for c in $CLIENTS; do
      for sc in $(scenarios_for "$c"); do
        run_one "$c" "$s" "$t" "$sc" "${target[@]}"
        if [ "$t" = http ]; then
          { echo "--- after $c $sc"; } >>"$OUT/http-$s.stderr"
        fi
      done
    done
    if [ -n "$srv_pid" ]; then kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; fi
  done
done

echo "results in $OUT"
[ ${#failed_runs[@]} -gt 0 ] && echo "failed: ${failed_runs[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
