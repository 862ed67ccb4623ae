#!/usr/bin/env node
// Official TypeScript SDK (@modelcontextprotocol/client 2.4.0) client driver for interop tests.
//
// Usage:
//   node ts/client.mjs SCENARIO --url http://127.0.0.1:PORT/mcp [options]
//   node ts/client.mjs SCENARIO [options] -- COMMAND [ARGS...]        (stdio: spawn the server)
//   env MCP_URL / MCP_STDIO_CMD (whitespace-split) are used when neither --url nor `--` is given.
//
// SCENARIO: basic | timeout | cancel | progress | progress_reset
// Options (defaults):
//   --timeout-ms 1500         request timeout for `timeout` (progress_reset uses --reset-timeout-ms 1000)
//   --cancel-after-ms 1000    when `cancel` aborts the AbortController
//   --slow-seconds N          `slow` duration (timeout/cancel: 5, progress/progress_reset: 2)
//   --interval-ms 100         `slow` step
//   --linger-ms 1000          wait after a timeout/cancel before the post-check and close (lets the
//                             server log CANCELLED before stdin EOF / connection teardown)
//   --no-warmup               skip the warm-up echo before timed scenarios
//
// Prints exactly one JSON line on stdout; exit 0 = scenario passed, 1 = failed, 2 = usage error.
// The stdio server's stderr is inherited (its CANCELLED/DONE/... lines appear on our stderr).
import { Client, SdkError, SdkErrorCode, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const PROTOCOL = '2026-07-28';

function nowNs() {
  return BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)).toString();
}
const sleep = ms => new Promise(r => setTimeout(r, ms));

function parseArgs(argv) {
  const dd = argv.indexOf('--');
  const own = dd >= 0 ? argv.slice(0, dd) : argv;
  const cmd = dd >= 0 ? argv.slice(dd + 1) : null;
  const o = {
    scenario: null,
    url: null,
    cmd,
    timeoutMs: 1500,
    resetTimeoutMs: 1000,
    cancelAfterMs: 1000,
    slowSeconds: null,
    intervalMs: 100,
    lingerMs: 1000,
    warmup: true
  };
  for (let i = 0; i < own.length; i++) {
    const a = own[i];
    const next = () => {
      if (i + 1 >= own.length) throw new Error(`missing value for ${a}`);
      return own[++i];
    };
    if (a === '--url') o.url = next();
    else if (a === '--timeout-ms') o.timeoutMs = Number(next());
    else if (a === '--reset-timeout-ms') o.resetTimeoutMs = Number(next());
    else if (a === '--cancel-after-ms') o.cancelAfterMs = Number(next());
    else if (a === '--slow-seconds') o.slowSeconds = Number(next());
    else if (a === '--interval-ms') o.intervalMs = Number(next());
    else if (a === '--linger-ms') o.lingerMs = Number(next());
    else if (a === '--no-warmup') o.warmup = false;
    else if (!a.startsWith('-') && o.scenario === null) o.scenario = a;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.url && !o.cmd) {
    if (process.env.MCP_URL) o.url = process.env.MCP_URL;
    else if (process.env.MCP_STDIO_CMD) o.cmd = process.env.MCP_STDIO_CMD.trim().split(/\s+/);
  }
  if (!o.scenario) throw new Error('missing SCENARIO');
  if (!o.url && (!o.cmd || o.cmd.length === 0)) throw new Error('need --url URL or -- COMMAND ARGS...');
  return o;
}

function errInfo(e) {
  if (!e) return null;
  return {
    name: e.name,
    class: e.constructor?.name,
    code: e.code,
    message: String(e.message ?? e),
    data: e.data === undefined ? undefined : e.data
  };
}

// Transport wrapper that timestamps every outgoing JSON-RPC message (tools/call requests and
// notifications/cancelled are what the timing checks care about).
function recording(transport, wire) {
  return new Proxy(transport, {
    get(target, prop) {
      if (prop === 'send') {
        return (message, options) => {
          const msgs = Array.isArray(message) ? message : [message];
          for (const m of msgs) {
            wire.push({
              t_ns: nowNs(),
              method: m.method,
              id: m.id,
              ...(m.method === 'notifications/cancelled' ? { params: m.params } : {})
            });
          }
          return target.send(message, options);
        };
      }
      const v = target[prop];
      return typeof v === 'function' ? v.bind(target) : v;
    },
    set(target, prop, value) {
      target[prop] = value;
      return true;
    }
  });
}

function textOf(result) {
  return (result?.content ?? [])
    .filter(c => c.type === 'text')
    .map(c => c.text)
    .join('');
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stdout.write(JSON.stringify({ sdk: 'ts', ok: false, error: { message: String(e.message) } }) + '\n');
    process.exit(2);
  }
  const out = {
    sdk: 'ts',
    sdk_version: '@modelcontextprotocol/client@2.4.0',
    scenario: o.scenario,
    transport: o.url ? 'http' : 'stdio',
    target: o.url ?? o.cmd.join(' '),
    ok: false
  };
  const wire = [];
  const checks = {};
  let client;
  const fail = msg => {
    out.failure = out.failure ? `${out.failure}; ${msg}` : msg;
  };

  try {
    const base = o.url
      ? new StreamableHTTPClientTransport(new URL(o.url))
      : new StdioClientTransport({
          command: o.cmd[0],
          args: o.cmd.slice(1),
          env: { ...process.env }, // default would be getDefaultEnvironment() (PATH/HOME/... only)
          stderr: 'inherit'
        });
    // NB: on the SDK's base StdioClientTransport, connect() with a negotiating mode (also `{ pin }`)
    // runs the server/discover probe on a disposable *sibling* process spawned from the same
    // parameters (stderr ignored), then starts this transport's own process. The Proxy below keeps
    // that behaviour (getPrototypeOf is forwarded), so the server command is spawned twice.
    const transport = recording(base, wire);
    client = new Client(
      { name: 'ts-sdk-interop-client', version: '2.4.0' },
      { versionNegotiation: { mode: { pin: PROTOCOL } } }
    );
    const t0 = nowNs();
    await client.connect(transport, { timeout: 15000 });
    out.connect = {
      t_start_ns: t0,
      t_done_ns: nowNs(),
      protocol_version: client.getNegotiatedProtocolVersion(),
      era: client.getProtocolEra(),
      server: client.getServerVersion() ?? null
    };

    const warmup = async () => {
      if (!o.warmup) return;
      const t = nowNs();
      const r = await client.callTool({ name: 'echo', arguments: { text: 'warmup' } }, { timeout: 15000 });
      out.warmup = { t_start_ns: t, t_done_ns: nowNs(), text: textOf(r) };
    };
    const postCheck = async () => {
      if (o.lingerMs > 0) await sleep(o.lingerMs);
      try {
        const r = await client.callTool({ name: 'echo', arguments: { text: 'after' } }, { timeout: 5000 });
        checks.post_echo_ok = textOf(r) === 'after';
      } catch (e) {
        checks.post_echo_ok = false;
        out.post_echo_error = errInfo(e);
      }
    };

    switch (o.scenario) {
      case 'basic': {
        const disc = await client.discover({ timeout: 10000 });
        out.discover = {
          supportedVersions: disc.supportedVersions,
          capabilities: disc.capabilities,
          resultType: disc.resultType,
          ttlMs: disc.ttlMs,
          cacheScope: disc.cacheScope
        };
        checks.discover_offers_2026 = Array.isArray(disc.supportedVersions) && disc.supportedVersions.includes(PROTOCOL);
        const tools = await client.listTools(undefined, { timeout: 10000 });
        out.tools = tools.tools.map(t => t.name);
        checks.has_echo = out.tools.includes('echo');
        checks.has_slow = out.tools.includes('slow');
        const r = await client.callTool({ name: 'echo', arguments: { text: 'hi' } }, { timeout: 10000 });
        out.echo_text = textOf(r);
        checks.echo_ok = out.echo_text === 'hi';
        break;
      }
      case 'timeout': {
        await warmup();
        const secs = o.slowSeconds ?? 5;
        const t_start = nowNs();
        try {
          const r = await client.callTool(
            { name: 'slow', arguments: { seconds: secs, interval_ms: o.intervalMs } },
            { timeout: o.timeoutMs }
          );
          out.unexpected_result = textOf(r);
          checks.got_timeout_error = false;
        } catch (e) {
          out.t_gave_up_ns = nowNs();
          out.error = errInfo(e);
          checks.got_timeout_error = e instanceof SdkError && e.code === SdkErrorCode.RequestTimeout;
        }
        out.t_start_ns = t_start;
        out.timeout_ms = o.timeoutMs;
        if (out.t_gave_up_ns) {
          out.elapsed_ms = Number(BigInt(out.t_gave_up_ns) - BigInt(t_start)) / 1e6;
          checks.elapsed_plausible = out.elapsed_ms >= o.timeoutMs - 50 && out.elapsed_ms < o.timeoutMs + 1500;
        }
        await postCheck();
        break;
      }
      case 'cancel': {
        await warmup();
        const secs = o.slowSeconds ?? 5;
        const ac = new AbortController();
        const t_start = nowNs();
        const p = client.callTool(
          { name: 'slow', arguments: { seconds: secs, interval_ms: o.intervalMs } },
          { signal: ac.signal, timeout: 30000 }
        );
        const timer = setTimeout(() => {
          out.t_abort_ns = nowNs();
          ac.abort('interop: user requested cancellation');
        }, o.cancelAfterMs);
        try {
          const r = await p;
          out.unexpected_result = textOf(r);
          checks.got_abort_error = false;
        } catch (e) {
          out.t_gave_up_ns = nowNs();
          out.error = errInfo(e);
          checks.got_abort_error = out.t_abort_ns !== undefined;
        }
        clearTimeout(timer);
        out.t_start_ns = t_start;
        await postCheck();
        break;
      }
      case 'progress':
      case 'progress_reset': {
        await warmup();
        const secs = o.slowSeconds ?? 2;
        const seen = [];
        const opts = {
          onprogress: p => seen.push({ progress: p.progress, total: p.total, t_ns: nowNs() }),
          timeout: 30000
        };
        if (o.scenario === 'progress_reset') {
          opts.timeout = o.resetTimeoutMs; // shorter than the call: succeeds only thanks to the reset
          opts.resetTimeoutOnProgress = true;
          opts.maxTotalTimeout = 30000;
          out.timeout_ms = o.resetTimeoutMs;
          out.slow_seconds = secs;
        }
        const t_start = nowNs();
        try {
          const r = await client.callTool({ name: 'slow', arguments: { seconds: secs, interval_ms: o.intervalMs } }, opts);
          out.result_text = textOf(r);
          checks.call_succeeded = true;
        } catch (e) {
          out.error = errInfo(e);
          checks.call_succeeded = false;
        }
        out.t_start_ns = t_start;
        out.t_done_ns = nowNs();
        out.progress = seen.map(s => s.progress);
        out.progress_total = seen.length ? seen[seen.length - 1].total : null;
        checks.got_progress = seen.length > 0;
        checks.strictly_increasing = seen.every((s, i) => i === 0 || s.progress > seen[i - 1].progress);
        break;
      }
      default:
        fail(`unknown scenario ${o.scenario}`);
    }
  } catch (e) {
    out.error = out.error ?? errInfo(e);
    fail(`exception: ${e?.message ?? e}`);
  }
  out.checks = checks;
  out.wire_out = wire.filter(w => w.method !== 'notifications/initialized');
  out.sent_cancel_notification = wire.some(w => w.method === 'notifications/cancelled');
  for (const [k, v] of Object.entries(checks)) if (v !== true) fail(`check ${k} failed`);
  out.ok = !out.failure;
  try {
    await Promise.race([client?.close(), sleep(3000)]);
  } catch {
    /* ignore */
  }
  // Timestamps are kept as decimal strings internally (BigInt-safe); emit them as JSON integers,
  // like the Python driver does.
  const json = JSON.stringify(out).replace(/"([A-Za-z_]*_ns)":"(\d+)"/g, '"$1":$2');
  process.stdout.write(json + '\n');
  process.exit(out.ok ? 0 : 1);
}

main();
