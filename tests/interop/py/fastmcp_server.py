#!/usr/bin/env python3
"""FastMCP (PyPI `fastmcp` 4.1.8 with `fastmcp-tasks` 4.1.8) server for the checker's table.

Usage:
  .venv/bin/python py/fastmcp_server.py [--tasks-url URL]               # stdio
  .venv/bin/python py/fastmcp_server.py [--tasks-url URL] --http PORT   # Streamable HTTP on 127.0.0.1:PORT/mcp

`--tasks-url` is the Docket backend of the tasks extension, as a FastMCP user configures it:
`memory://` (the default: one process) or `redis://127.0.0.1:PORT/0`.

Tools, as a new user would write them from FastMCP's documentation:
  slow {seconds=10, interval_ms=100}   sleeps in steps, ctx.report_progress each step
  slow_compute {seconds, label?}       task=True (a task when the client declares the extension):
                                       sleeps `seconds`, then returns its label
"""

from __future__ import annotations

import argparse
import logging
import math
import sys

import anyio
from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension


def build(tasks_url: str) -> FastMCP:
    mcp = FastMCP("fastmcp-interop-server")
    mcp.add_extension(TasksExtension(url=tasks_url))

    @mcp.tool(description="Sleep for `seconds`, in steps of `interval_ms`, reporting progress each step")
    async def slow(ctx: Context, seconds: float = 10, interval_ms: float = 100) -> str:
        interval = max(1.0, float(interval_ms))
        steps = max(1, math.ceil(seconds * 1000 / interval))
        for i in range(1, steps + 1):
            await anyio.sleep(interval / 1000)
            await ctx.report_progress(i, steps, f"step {i}/{steps}")
        return f"slept {seconds}s in {steps} steps"

    @mcp.tool(task=True, description="Computes for `seconds` (a task when the client supports tasks)")
    async def slow_compute(seconds: float, label: str = "done") -> str:
        await anyio.sleep(float(seconds))
        return label

    return mcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    ap.add_argument("--tasks-url", default="memory://", help="the tasks extension's Docket backend")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    mcp = build(args.tasks_url)
    if args.http is None:
        mcp.run(show_banner=False)
    else:
        mcp.run("http", host="127.0.0.1", port=args.http, show_banner=False)


if __name__ == "__main__":
    main()
