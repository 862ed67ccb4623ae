#!/usr/bin/env python3
"""Official Python SDK (mcp 2.3.0) client driver for interop tests.

Usage:
  .venv/bin/python py/client.py SCENARIO --url http://127.0.0.1:PORT/mcp [options]
  .venv/bin/python py/client.py SCENARIO [options] -- COMMAND [ARGS...]     (stdio: spawn the server)
  env MCP_URL / MCP_STDIO_CMD (whitespace-split) are used when neither --url nor `--` is given.

SCENARIO: basic | timeout | cancel | progress
Options (defaults): --timeout-s 1.5, --cancel-after-s 1.0, --slow-seconds (timeout/cancel 5, progress 2),
  --interval-ms 100, --linger-s 1.0 (wait after timeout/cancel before the post-check echo and close),
  --no-warmup.

Prints exactly one JSON line on stdout; exit 0 = passed, 1 = failed, 2 = usage error.
The stdio server's stderr goes to our stderr (stdio_client's errlog default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import REQUEST_TIMEOUT

PROTOCOL = "2026-07-28"


def now_ns() -> int:
    return time.time_ns()


class _RecordingWrite:
    """Wraps the transport's write stream to timestamp every outgoing JSON-RPC message."""

    def __init__(self, inner: Any, wire: list[dict[str, Any]]):
        self._inner = inner
        self._wire = wire

    async def send(self, item: Any) -> None:
        msg = getattr(item, "message", item)
        msg = getattr(msg, "root", msg)
        entry: dict[str, Any] = {"t_ns": now_ns(), "method": getattr(msg, "method", None), "id": getattr(msg, "id", None)}
        if entry["method"] == "notifications/cancelled":
            params = getattr(msg, "params", None)
            entry["params"] = params if isinstance(params, dict) else getattr(params, "model_dump", lambda **_: params)()
        if entry["method"] is not None or entry["id"] is not None:
            self._wire.append(entry)
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _RecordingWrite:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class RecordingTransport:
    """A `mcp.client` Transport (async context manager yielding (read, write)) around a real one."""

    def __init__(self, inner: Any, wire: list[dict[str, Any]]):
        self._inner = inner
        self._wire = wire

    async def __aenter__(self) -> Any:
        read, write = await self._inner.__aenter__()
        return read, _RecordingWrite(write, self._wire)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


def err_info(e: BaseException) -> dict[str, Any]:
    d: dict[str, Any] = {"class": type(e).__name__, "message": str(e)}
    if isinstance(e, MCPError):
        d["code"] = e.code
        d["data"] = e.data if isinstance(e.data, (dict, list, str, int, float, type(None))) else repr(e.data)
    return d


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in (getattr(result, "content", None) or []) if getattr(c, "type", "") == "text")


def parse_args(argv: list[str]) -> argparse.Namespace:
    cmd: list[str] | None = None
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(add_help=True)
    ap.add_argument("scenario", choices=["basic", "timeout", "cancel", "progress"])
    ap.add_argument("--url")
    ap.add_argument("--timeout-s", type=float, default=1.5)
    ap.add_argument("--cancel-after-s", type=float, default=1.0)
    ap.add_argument("--slow-seconds", type=float, default=None)
    ap.add_argument("--interval-ms", type=float, default=100)
    ap.add_argument("--linger-s", type=float, default=1.0)
    ap.add_argument("--no-warmup", action="store_true")
    ns = ap.parse_args(argv)
    ns.cmd = cmd
    if not ns.url and not ns.cmd:
        if os.environ.get("MCP_URL"):
            ns.url = os.environ["MCP_URL"]
        elif os.environ.get("MCP_STDIO_CMD"):
            ns.cmd = os.environ["MCP_STDIO_CMD"].split()
    if not ns.url and not ns.cmd:
        ap.error("need --url URL or -- COMMAND ARGS...")
    return ns


async def run(o: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sdk": "python",
        "sdk_version": "mcp==2.3.0",
        "scenario": o.scenario,
        "transport": "http" if o.url else "stdio",
        "target": o.url or " ".join(o.cmd),
        "ok": False,
    }
    wire: list[dict[str, Any]] = []
    checks: dict[str, bool] = {}
    failures: list[str] = []

    if o.url:
        inner = streamable_http_client(o.url)
    else:
        # env: the SDK default is get_default_environment() (HOME, PATH, ...) merged with `env`.
        inner = stdio_client(StdioServerParameters(command=o.cmd[0], args=o.cmd[1:], env=dict(os.environ)))
    transport = RecordingTransport(inner, wire)

    try:
        t0 = now_ns()
        # mode="2026-07-28" adopts the version directly: no server/discover or initialize at connect.
        async with Client(transport, mode=PROTOCOL) as client:
            out["connect"] = {"t_start_ns": t0, "t_done_ns": now_ns(), "protocol_version": client.protocol_version}

            async def warmup() -> None:
                if o.no_warmup:
                    return
                t = now_ns()
                r = await client.call_tool("echo", {"text": "warmup"}, read_timeout_seconds=15)
                out["warmup"] = {"t_start_ns": t, "t_done_ns": now_ns(), "text": text_of(r)}

            async def post_check() -> None:
                if o.linger_s > 0:
                    await asyncio.sleep(o.linger_s)
                try:
                    r = await client.call_tool("echo", {"text": "after"}, read_timeout_seconds=5)
                    checks["post_echo_ok"] = text_of(r) == "after"
                except Exception as e:  # noqa: BLE001
                    checks["post_echo_ok"] = False
                    out["post_echo_error"] = err_info(e)

            if o.scenario == "basic":
                disc = await client.session.discover()
                out["discover"] = disc.model_dump(mode="json", by_alias=True, exclude_none=True)
                checks["discover_offers_2026"] = PROTOCOL in (disc.supported_versions or [])
                tools = await client.list_tools()
                out["tools"] = [t.name for t in tools.tools]
                checks["has_echo"] = "echo" in out["tools"]
                checks["has_slow"] = "slow" in out["tools"]
                r = await client.call_tool("echo", {"text": "hi"}, read_timeout_seconds=10)
                out["echo_text"] = text_of(r)
                checks["echo_ok"] = out["echo_text"] == "hi"

            elif o.scenario == "timeout":
                await warmup()
                secs = o.slow_seconds if o.slow_seconds is not None else 5
                t_start = now_ns()
                try:
                    r = await client.call_tool(
                        "slow", {"seconds": secs, "interval_ms": o.interval_ms}, read_timeout_seconds=o.timeout_s
                    )
                    out["unexpected_result"] = text_of(r)
                    checks["got_timeout_error"] = False
                except MCPError as e:
                    out["t_gave_up_ns"] = now_ns()
                    out["error"] = err_info(e)
                    checks["got_timeout_error"] = e.code == REQUEST_TIMEOUT
                out["t_start_ns"] = t_start
                out["timeout_ms"] = o.timeout_s * 1000
                if "t_gave_up_ns" in out:
                    out["elapsed_ms"] = (out["t_gave_up_ns"] - t_start) / 1e6
                    checks["elapsed_plausible"] = (
                        o.timeout_s * 1000 - 50 <= out["elapsed_ms"] < o.timeout_s * 1000 + 1500
                    )
                await post_check()

            elif o.scenario == "cancel":
                await warmup()
                secs = o.slow_seconds if o.slow_seconds is not None else 5
                t_start = now_ns()
                task = asyncio.ensure_future(
                    client.call_tool("slow", {"seconds": secs, "interval_ms": o.interval_ms}, read_timeout_seconds=30)
                )
                done, _ = await asyncio.wait({task}, timeout=o.cancel_after_s)
                if done:
                    out["unexpected_result"] = text_of(task.result()) if not task.exception() else None
                    out["error"] = err_info(task.exception()) if task.exception() else None
                    checks["got_cancelled"] = False
                else:
                    out["t_abort_ns"] = now_ns()
                    task.cancel()
                    try:
                        await task
                        checks["got_cancelled"] = False
                    except asyncio.CancelledError:
                        out["t_gave_up_ns"] = now_ns()
                        checks["got_cancelled"] = True
                    except Exception as e:  # noqa: BLE001
                        out["t_gave_up_ns"] = now_ns()
                        out["error"] = err_info(e)
                        checks["got_cancelled"] = False
                out["t_start_ns"] = t_start
                await post_check()

            elif o.scenario == "progress":
                await warmup()
                secs = o.slow_seconds if o.slow_seconds is not None else 2
                seen: list[dict[str, Any]] = []

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    seen.append({"progress": progress, "total": total, "t_ns": now_ns()})

                t_start = now_ns()
                try:
                    r = await client.call_tool(
                        "slow",
                        {"seconds": secs, "interval_ms": o.interval_ms},
                        read_timeout_seconds=30,
                        progress_callback=on_progress,
                    )
                    out["result_text"] = text_of(r)
                    checks["call_succeeded"] = True
                except Exception as e:  # noqa: BLE001
                    out["error"] = err_info(e)
                    checks["call_succeeded"] = False
                # Progress callbacks are spawned as tasks by the dispatcher; let stragglers run.
                await asyncio.sleep(0.05)
                out["t_start_ns"] = t_start
                out["t_done_ns"] = now_ns()
                out["progress"] = [s["progress"] for s in seen]
                out["progress_total"] = seen[-1]["total"] if seen else None
                checks["got_progress"] = bool(seen)
                checks["strictly_increasing"] = all(
                    seen[i]["progress"] > seen[i - 1]["progress"] for i in range(1, len(seen))
                )
    except Exception as e:  # noqa: BLE001
        out.setdefault("error", err_info(e))
        failures.append(f"exception: {e!r}")

    out["checks"] = checks
    out["wire_out"] = wire
    handed = any(w["method"] == "notifications/cancelled" for w in wire)
    # wire_out is recorded where the dispatcher hands messages to the transport. The stdio transport
    # writes them as-is; the Streamable HTTP transport (2026-07-28) turns an outbound
    # notifications/cancelled into aborting that request's POST and never POSTs it.
    out["cancel_notification_handed_to_transport"] = handed
    out["sent_cancel_notification"] = handed and not o.url
    failures += [f"check {k} failed" for k, v in checks.items() if v is not True]
    if failures:
        out["failure"] = "; ".join(failures)
    out["ok"] = not failures
    return out


def main() -> None:
    o = parse_args(sys.argv[1:])
    out = asyncio.run(run(o))
    sys.stdout.write(json.dumps(out, default=str) + "\n")
    sys.stdout.flush()
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
