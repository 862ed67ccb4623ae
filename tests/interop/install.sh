#!/usr/bin/env bash
# Installs the pinned official MCP SDKs for the interop suite. Idempotent and fast when already
# installed (it compares stamps of package-lock.json / requirements.txt with what was installed).
#
#   bash tests/interop/install.sh            # from anywhere
#   FORCE=1 bash tests/interop/install.sh    # reinstall regardless of stamps
#
# Needs: node >= 20 with npm, python3 (>= 3.10) with the venv module; network access to the npm
# registry and PyPI only.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

sum() { sha256sum "$1" | cut -d' ' -f1; }

# --- npm: @modelcontextprotocol/client@2.4.0, server@2.4.0, node@2.1.2, zod, for the 2025-era cells
# @modelcontextprotocol/sdk@1.32.2 (the TS SDK v1 client) and server-everything@2026.8.31, and the
# official conformance suite @modelcontextprotocol/conformance@0.2.0-alpha.11 (conformance_tasks.sh)
# (lockfile-exact) ---
npm_stamp="node_modules/.interop-lock-sha256"
if [ "${FORCE:-0}" != 1 ] && [ -f "$npm_stamp" ] && [ "$(cat "$npm_stamp")" = "$(sum package-lock.json)" ]; then
  echo "interop: node_modules up to date"
else
  echo "interop: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  sum package-lock.json >"$npm_stamp"
fi

# --- Python: mcp==2.3.0, fastmcp==4.1.8 with fastmcp-tasks==4.1.8 (its Docket task engine: pydocket),
# and their pinned closure, in tests/interop/.venv ---
py_stamp=".venv/.interop-req-sha256"
if [ "${FORCE:-0}" != 1 ] && [ -x .venv/bin/python ] && [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$(sum requirements.txt)" ]; then
  echo "interop: .venv up to date"
else
  if [ ! -x .venv/bin/python ]; then
    echo "interop: python3 -m venv .venv"
    python3 -m venv .venv
  fi
  echo "interop: pip install -r requirements.txt"
  .venv/bin/python -m pip install --disable-pip-version-check --quiet -r requirements.txt
  sum requirements.txt >"$py_stamp"
fi

# Cheap sanity check that the pinned versions are what is importable.
node -e "const v=require('./node_modules/@modelcontextprotocol/client/package.json').version; if(v!=='2.4.0'){console.error('client '+v);process.exit(1)}"
node -e "const v=require('./node_modules/@modelcontextprotocol/server/package.json').version; if(v!=='2.4.0'){console.error('server '+v);process.exit(1)}"
node -e "const v=require('./node_modules/@modelcontextprotocol/sdk/package.json').version; if(v!=='1.32.2'){console.error('sdk '+v);process.exit(1)}"
node -e "const v=require('./node_modules/@modelcontextprotocol/server-everything/package.json').version; if(v!=='2026.8.31'){console.error('server-everything '+v);process.exit(1)}"
node -e "const v=require('./node_modules/@modelcontextprotocol/conformance/package.json').version; if(v!=='0.2.0-alpha.11'){console.error('conformance '+v);process.exit(1)}"
.venv/bin/python -c "import importlib.metadata as m, sys; v=m.version('mcp'); sys.exit(0 if v=='2.3.0' else 'mcp '+v)"
.venv/bin/python -c "import importlib.metadata as m, sys; v=(m.version('fastmcp'), m.version('fastmcp-tasks')); sys.exit(0 if v==('4.1.8', '4.1.8') else 'fastmcp, fastmcp-tasks '+str(v))"
echo "interop: ok (npm @modelcontextprotocol/client@2.4.0 server@2.4.0 node@2.1.2 sdk@1.32.2 server-everything@2026.8.31 conformance@0.2.0-alpha.11; PyPI mcp==2.3.0 fastmcp==4.1.8 fastmcp-tasks==4.1.8)"
