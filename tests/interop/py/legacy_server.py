#!/usr/bin/env python3
"""The Python SDK (mcp 2.3.0) interop server (py/server.py: tools echo and slow, the same stderr
event lines) served as a 2025-era Streamable HTTP server only: sessions minted at initialize,
notifications/cancelled POSTed in the session, DELETE.

The SDK serves both eras on one endpoint; this script keeps the SDK's own legacy (2025) code path
and hides the modern one the way a 2025-11-25 server answers a 2026-07-28 request: `400` with a
JSON-RPC error that is not a modern one and carries no request id. A dual-era client must then fall
back to `initialize`.

Usage: .venv/bin/python py/legacy_server.py PORT      (http://127.0.0.1:PORT/mcp)
"""

from __future__ import annotations

import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import uvicorn  # noqa: E402

import server  # noqa: E402  (py/server.py: the tools and the event lines)

LEGACY = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}


def legacy_only(app):
    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            version = headers.get(b"mcp-protocol-version", b"").decode("latin-1")
            if version and version not in LEGACY:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": "server-error",
                        "error": {
                            "code": -32600,
                            "message": f"Bad Request: Unsupported protocol version: {version}",
                        },
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                server.ev(f"REFUSED_MODERN {version}")
                return
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    port = int(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    app = server.mcp.streamable_http_app()
    server.ev(f"LISTENING http://127.0.0.1:{port}/mcp")
    uvicorn.run(legacy_only(app), host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
