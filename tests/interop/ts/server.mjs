#!/usr/bin/env node
// Official TypeScript SDK (@modelcontextprotocol/server 2.4.0) MCP server for interop tests.
//
// Usage:
//   node ts/server.mjs                 # stdio (default), 2026-07-28 era via serveStdio()
//   node ts/server.mjs --http PORT     # Streamable HTTP on 127.0.0.1:PORT (any path), via
//                                      # createMcpHandler() + toNodeHandler() (@modelcontextprotocol/node 2.1.2)
//   env INTEROP_TRACE=1                # also log every inbound/outbound JSON-RPC message to stderr
//
// Tools: echo {text} -> text content; slow {seconds=10, interval_ms=100} -> loops, emitting
// notifications/progress (strictly increasing 1,2,3..) when the request carries a progressToken.
//
// stderr event lines (one per line, ns = unix epoch nanoseconds):
//   LISTENING <url>                            (HTTP only, once bound)
//   CANCELLED <request id as JSON> <ns> <reason>   handler saw ctx.mcpReq.signal abort
//   DONE <request id as JSON> <ns>             handler completed normally
//   RECEIVED_CANCEL <request id as JSON> <reason>  an inbound notifications/cancelled (stdio: transport
//                                              hook; HTTP: a POSTed notifications/cancelled body)
//   HTTP_CLOSE <request id as JSON> <ns>       HTTP only: the client closed the response before it finished
import http from 'node:http';
import * as z from 'zod';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { toNodeHandler } from '@modelcontextprotocol/node';

const TRACE = process.env.INTEROP_TRACE === '1';

function nowNs() {
  // performance.timeOrigin is the epoch ms at process start; now() adds sub-ms precision.
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)).toString();
}
function ev(line) {
  process.stderr.write(line + '\n');
}
function reasonText(reason) {
  if (reason === undefined || reason === null) return '';
  if (typeof reason === 'string') return reason;
  if (reason instanceof Error) return `${reason.name}: ${reason.message}`;
  try {
    return JSON.stringify(reason);
  } catch {
    return String(reason);
  }
}
function oneLine(s) {
  return String(s).replace(/[\r\n]+/g, ' ');
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason ?? new Error('aborted'));
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason ?? new Error('aborted'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function buildServer() {
  const server = new McpServer({ name: 'ts-sdk-interop-server', version: '2.4.0' }, { capabilities: { tools: {} } });

  server.registerTool(
    'echo',
    { description: 'Echo the text argument back as text content', inputSchema: z.object({ text: z.string() }) },
    async ({ text }) => ({ content: [{ type: 'text', text }] })
  );

  server.registerTool(
    'slow',
    {
      description: 'Sleep for `seconds`, in steps of `interval_ms`, sending progress each step when a progressToken is given',
      inputSchema: z.object({ seconds: z.number().optional(), interval_ms: z.number().optional() })
    },
    async ({ seconds, interval_ms }, ctx) => {
      const secs = seconds ?? 10;
      const interval = Math.max(1, interval_ms ?? 100);
      const id = JSON.stringify(ctx.mcpReq.id);
      const token = ctx.mcpReq._meta?.progressToken;
      const signal = ctx.mcpReq.signal;
      const steps = Math.max(1, Math.ceil((secs * 1000) / interval));
      let reported = false;
      const onAbort = () => {
        if (reported) return;
        reported = true;
        ev(`CANCELLED ${id} ${nowNs()} ${oneLine(reasonText(signal.reason))}`);
      };
      if (signal.aborted) onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        for (let i = 1; i <= steps; i++) {
          await sleep(interval, signal);
          if (token !== undefined && !signal.aborted) {
            await ctx.mcpReq.notify({
              method: 'notifications/progress',
              params: { progressToken: token, progress: i, total: steps, message: `step ${i}/${steps}` }
            });
          }
        }
      } catch (e) {
        onAbort();
        throw e;
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
      ev(`DONE ${id} ${nowNs()}`);
      return { content: [{ type: 'text', text: `slept ${secs}s in ${steps} steps` }] };
    }
  );
  return server;
}

function logInbound(msg, where) {
  if (TRACE) ev(`WIRE_IN ${where} ${nowNs()} ${JSON.stringify(msg)}`);
  const msgs = Array.isArray(msg) ? msg : [msg];
  for (const m of msgs) {
    if (m && m.method === 'notifications/cancelled') {
      ev(`RECEIVED_CANCEL ${JSON.stringify(m.params?.requestId)} ${oneLine(m.params?.reason ?? '')}`);
    }
  }
}

function serveOverStdio() {
  // serveStdio({ transport }) lets us bring our own transport; a Proxy over the SDK's
  // StdioServerTransport intercepts the onmessage callback serveStdio installs, so we can log
  // inbound notifications/cancelled before the SDK handles it.
  const inner = new StdioServerTransport();
  const transport = new Proxy(inner, {
    set(target, prop, value) {
      if (prop === 'onmessage' && typeof value === 'function') {
        target.onmessage = (msg, extra) => {
          logInbound(msg, 'stdio');
          return value(msg, extra);
        };
        return true;
      }
      if (prop === 'send') return Reflect.set(target, prop, value);
      target[prop] = value;
      return true;
    },
    get(target, prop) {
      if (prop === 'send' && TRACE) {
        return (m, o) => {
          ev(`WIRE_OUT stdio ${nowNs()} ${JSON.stringify(m)}`);
          return target.send(m, o);
        };
      }
      const v = target[prop];
      return typeof v === 'function' ? v.bind(target) : v;
    }
  });
  serveStdio(() => buildServer(), {
    transport,
    onerror: e => ev(`SDK_ERROR ${oneLine(e?.stack ?? e)}`)
  });
}

function serveOverHttp(port) {
  const handler = createMcpHandler(() => buildServer(), {
    onerror: e => ev(`SDK_ERROR ${oneLine(e?.message ?? e)}`)
  });
  const node = toNodeHandler(handler, { onerror: e => ev(`ADAPTER_ERROR ${oneLine(e?.message ?? e)}`) });
  const srv = http.createServer(async (req, res) => {
    try {
      let parsed;
      if (req.method === 'POST') {
        const chunks = [];
        for await (const c of req) chunks.push(c);
        const body = Buffer.concat(chunks).toString('utf8');
        try {
          parsed = JSON.parse(body);
        } catch {
          parsed = undefined;
        }
        if (parsed !== undefined) logInbound(parsed, `http ${req.method} ${req.url}`);
        const reqId = parsed && !Array.isArray(parsed) && parsed.id !== undefined ? JSON.stringify(parsed.id) : null;
        if (reqId !== null) {
          res.on('close', () => {
            if (!res.writableFinished) ev(`HTTP_CLOSE ${reqId} ${nowNs()}`);
          });
        }
        if (parsed === undefined) {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
          return;
        }
      } else if (TRACE) {
        ev(`WIRE_IN http ${req.method} ${req.url} ${nowNs()} (no body)`);
      }
      await node(req, res, parsed);
    } catch (e) {
      ev(`HTTP_ERROR ${oneLine(e?.message ?? e)}`);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    }
  });
  srv.listen(port, '127.0.0.1', () => {
    ev(`LISTENING http://127.0.0.1:${srv.address().port}/mcp`);
  });
  const stop = () => {
    srv.close();
    void handler.close();
    setTimeout(() => process.exit(0), 200).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const argv = process.argv.slice(2);
const httpIdx = argv.indexOf('--http');
if (httpIdx >= 0) {
  const port = Number(argv[httpIdx + 1]);
  if (!Number.isInteger(port) || port < 0) {
    ev('usage: server.mjs [--http PORT]');
    process.exit(2);
  }
  serveOverHttp(port);
} else {
  serveOverStdio();
}
