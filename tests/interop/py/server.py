#!/usr/bin/env python3
"""Official Python SDK (mcp 2.3.0) MCP server for interop tests.

Usage:
  .venv/bin/python py/server.py               # stdio (default); the SDK serves server/discover (2026-07-28)
                                              # and the legacy initialize handshake on the same connection
  .venv/bin/python py/server.py --http PORT   # Streamable HTTP on http://127.0.0.1:PORT/mcp (uvicorn)

Tools: echo {text} -> text content; slow {seconds=10, interval_ms=100} -> loops, calling
ctx.report_progress(i, steps) each step (the SDK sends notifications/progress only when the request
carried a progressToken), strictly increasing 1, 2, 3, ...

stderr event lines (ns = unix epoch nanoseconds):
  LISTENING <url>                                   (HTTP only)
  CANCELLED <request id as JSON> <ns> <reason>      CancelledError raised inside the tool handler
  DONE <request id as JSON> <ns>                    handler completed normally
  RECEIVED_CANCEL <request id as JSON> <reason>     inbound notifications/cancelled, via
                                                    Server.add_notification_handler (teed after the
                                                    dispatcher has already cancelled the handler)
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CancelledNotificationParams

# Reasons seen on inbound notifications/cancelled, by request id (JSON text).
_cancel_reasons: dict[str, str] = {}


def now_ns() -> int:
    return time.time_ns()


def ev(line: str) -> None:
    sys.stderr.write(line.replace("\n", " ") + "\n")
    sys.stderr.flush()


mcp = MCPServer(name="py-sdk-interop-server", version="2.3.0", log_level="WARNING")


@mcp.tool(description="Echo the text argument back as text content")
async def echo(text: str) -> str:
    return text


@mcp.tool(
    description="Sleep for `seconds`, in steps of `interval_ms`, sending progress each step when a progressToken is given"
)
async def slow(ctx: Context, seconds: float = 10, interval_ms: float = 100) -> str:
    rid = json.dumps(ctx.request_context.request_id)
    interval = max(1.0, float(interval_ms))
    steps = max(1, math.ceil(seconds * 1000 / interval))
    try:
        for i in range(1, steps + 1):
            await anyio.sleep(interval / 1000)
            await ctx.report_progress(i, steps, f"step {i}/{steps}")
    except anyio.get_cancelled_exc_class():
        t = now_ns()
        # The dispatcher cancels the handler's scope *before* the teed notification handler runs,
        # so give it a moment (shielded) to record the reason, if there was a notification at all.
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.02)
        reason = _cancel_reasons.get(rid, "")
        ev(f"CANCELLED {rid} {t} {reason}")
        raise
    ev(f"DONE {rid} {now_ns()}")
    return f"slept {seconds}s in {steps} steps"


async def _on_cancelled(ctx: Any, params: CancelledNotificationParams) -> None:
    rid = json.dumps(params.request_id)
    _cancel_reasons[rid] = params.reason or ""
    ev(f"RECEIVED_CANCEL {rid} {params.reason or ''}")


# Public lowlevel API: tee of inbound notifications/cancelled (the JSON-RPC dispatcher intercepts it
# first to cancel the in-flight handler, then forwards it to registered notification handlers).
mcp._lowlevel_server.add_notification_handler(  # pyright: ignore[reportPrivateUsage]
    "notifications/cancelled", CancelledNotificationParams, _on_cancelled
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.http is None:
        mcp.run()  # stdio
    else:
        ev(f"LISTENING http://127.0.0.1:{args.http}/mcp")
        mcp.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
