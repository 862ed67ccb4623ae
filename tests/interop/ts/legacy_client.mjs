#!/usr/bin/env node
// TypeScript SDK clients in their 2025-era (initialize + session) mode, for interop tests:
//   --sdk v1   @modelcontextprotocol/sdk 1.32.2 (what most MCP hosts embed): always initialize
//   --sdk v2   @modelcontextprotocol/client 2.4.0 with its default version negotiation (no pin)
//
// Usage: node ts/legacy_client.mjs SCENARIO --sdk v1|v2 --url http://127.0.0.1:PORT/mcp [options]
// SCENARIO: call | timeout | cancel | gone
//   gone: a slow call (--slow-seconds) is left in flight for the harness to kill the session's
//   server (a replica behind a balancer); then what the client sees: that call's error, the next
//   call's error, and a fresh connection (a new session) that works.
// Options: --timeout-ms 1500, --cancel-after-ms 1000, --slow-seconds 5, --interval-ms 100,
//          --linger-ms 1000 (wait after a timeout/cancel before the post-check echo)
//
// Prints one JSON line on stdout (the same fields as ts/client.mjs: wire_out with timestamped
// outgoing messages, t_gave_up_ns / t_abort_ns, checks); exit 0 = scenario passed, 1 = failed.

const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)).toString();
const sleep = ms => new Promise(r => setTimeout(r, ms));

function parseArgs(argv) {
  const o = { scenario: null, sdk: null, url: null, timeoutMs: 1500, cancelAfterMs: 1000, slowSeconds: 5, intervalMs: 100, lingerMs: 1000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i];
    if (a === '--sdk') o.sdk = next();
    else if (a === '--url') o.url = next();
    else if (a === '--timeout-ms') o.timeoutMs = Number(next());
    else if (a === '--cancel-after-ms') o.cancelAfterMs = Number(next());
    else if (a === '--slow-seconds') o.slowSeconds = Number(next());
    else if (a === '--interval-ms') o.intervalMs = Number(next());
    else if (a === '--linger-ms') o.lingerMs = Number(next());
    else if (!a.startsWith('-') && o.scenario === null) o.scenario = a;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.scenario || !o.url || !['v1', 'v2'].includes(o.sdk)) throw new Error('need SCENARIO --sdk v1|v2 --url URL');
  return o;
}

async function sdk(which) {
  if (which === 'v1') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    return {
      version: '@modelcontextprotocol/sdk@1.32.2',
      Client,
      Transport: StreamableHTTPClientTransport,
      // v1: callTool(params, resultSchema, options)
      callTool: (c, params, opts) => c.callTool(params, undefined, opts)
    };
  }
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  return {
    version: '@modelcontextprotocol/client@2.4.0 (default negotiation)',
    Client,
    Transport: StreamableHTTPClientTransport,
    callTool: (c, params, opts) => c.callTool(params, opts)
  };
}

function recording(transport, wire) {
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    for (const m of Array.isArray(message) ? message : [message]) {
      wire.push({ t_ns: nowNs(), method: m.method, id: m.id, ...(m.method === 'notifications/cancelled' ? { params: m.params } : {}) });
    }
    return send(message, options);
  };
  return transport;
}

const textOf = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('');
const errInfo = e => (e ? { name: e.name, code: e.code, message: String(e.message ?? e) } : null);

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: { message: String(e.message) } }) + '\n');
    process.exit(2);
  }
  const S = await sdk(o.sdk);
  const out = { sdk: o.sdk, sdk_version: S.version, scenario: o.scenario, transport: 'http', target: o.url, ok: false };
  const wire = [];
  const checks = {};
  let client;
  let transport;
  try {
    transport = recording(new S.Transport(new URL(o.url)), wire);
    client = new S.Client({ name: `ts-${o.sdk}-legacy-interop-client`, version: '1.0.0' });
    await client.connect(transport, { timeout: 15000 });
    out.session_id = transport.sessionId ?? null;
    out.protocol_version = transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.() ?? null;
    checks.initialized = wire.some(w => w.method === 'initialize');
    checks.has_session = typeof out.session_id === 'string' && out.session_id.length > 0;
    checks.legacy_version = typeof out.protocol_version === 'string' && out.protocol_version.startsWith('2025-');

    const echo = async text => textOf(await S.callTool(client, { name: 'echo', arguments: { text } }, { timeout: 15000 }));
    const slow = opts => S.callTool(client, { name: 'slow', arguments: { seconds: o.slowSeconds, interval_ms: o.intervalMs } }, opts);
    switch (o.scenario) {
      case 'call': {
        const tools = await client.listTools();
        out.tools = tools.tools.map(t => t.name);
        checks.has_slow = out.tools.includes('slow');
        checks.echo_ok = (await echo('hi')) === 'hi';
        break;
      }
      case 'timeout':
      case 'cancel': {
        checks.warmup_ok = (await echo('warmup')) === 'warmup';
        const ac = new AbortController();
        out.t_start_ns = nowNs();
        const timer =
          o.scenario === 'cancel'
            ? setTimeout(() => {
                out.t_abort_ns = nowNs();
                ac.abort('interop: user requested cancellation');
              }, o.cancelAfterMs)
            : null;
        try {
          const r = await slow(o.scenario === 'cancel' ? { signal: ac.signal, timeout: 30000 } : { timeout: o.timeoutMs });
          out.unexpected_result = textOf(r);
          checks.gave_up = false;
        } catch (e) {
          out.t_gave_up_ns = nowNs();
          out.error = errInfo(e);
          checks.gave_up = true;
        }
        clearTimeout(timer);
        checks.sent_cancel_notification = wire.some(w => w.method === 'notifications/cancelled');
        await sleep(o.lingerMs);
        try {
          checks.post_echo_ok = (await echo('after')) === 'after';
        } catch (e) {
          out.post_echo_error = errInfo(e);
          checks.post_echo_ok = false;
        }
        break;
      }
      case 'gone': {
        checks.warmup_ok = (await echo('warmup')) === 'warmup';
        out.t_start_ns = nowNs();
        try {
          out.unexpected_result = textOf(await slow({ timeout: 60000 }));
        } catch (e) {
          out.t_in_flight_error_ns = nowNs();
          out.in_flight_error = errInfo(e);
        }
        checks.in_flight_failed = out.in_flight_error != null;
        try {
          out.unexpected_after = await echo('after');
        } catch (e) {
          out.t_after_error_ns = nowNs();
          out.after_error = errInfo(e);
        }
        checks.after_failed = out.after_error != null;
        // What a host does on that error: connect again, which initializes a new session.
        await Promise.race([client.close(), sleep(3000)]).catch(() => {});
        transport = recording(new S.Transport(new URL(o.url)), wire);
        client = new S.Client({ name: `ts-${o.sdk}-legacy-interop-client`, version: '1.0.0' });
        await client.connect(transport, { timeout: 15000 });
        out.new_session_id = transport.sessionId ?? null;
        checks.new_session = typeof out.new_session_id === 'string' && out.new_session_id !== out.session_id;
        checks.reconnected_echo_ok = (await echo('again')) === 'again';
        break;
      }
      default:
        throw new Error(`unknown scenario ${o.scenario}`);
    }
  } catch (e) {
    out.error = out.error ?? errInfo(e);
    out.failure = `exception: ${e?.message ?? e}`;
  }
  out.checks = checks;
  out.wire_out = wire.filter(w => w.method !== 'notifications/initialized');
  for (const [k, v] of Object.entries(checks)) if (v !== true) out.failure = `${out.failure ?? ''} check ${k} failed`.trim();
  out.ok = !out.failure;
  try {
    // Ends the session (DELETE) on both SDKs.
    await Promise.race([transport?.terminateSession?.(), sleep(3000)]);
    await Promise.race([client?.close(), sleep(3000)]);
  } catch {
    /* ignore */
  }
  const json = JSON.stringify(out).replace(/"([A-Za-z_]*_ns)":"(\d+)"/g, '"$1":$2');
  process.stdout.write(json + '\n');
  process.exit(out.ok ? 0 : 1);
}

main();
