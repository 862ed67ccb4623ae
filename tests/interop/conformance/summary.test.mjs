// Self-test of summary.mjs: what it counts, what it sets aside as upstream #424, and the cancel
// check it requires. Each case writes checks.json files laid out as the conformance CLI writes
// them (RESULTS/<scenario>/server-<scenario>-<time>/checks.json) and runs summary.mjs on them.
//
//   node tests/interop/conformance/summary.test.mjs     # exit 0 when every case holds
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SUMMARY = new URL('./summary.mjs', import.meta.url).pathname;
const MISSING_CONTENT = "CallToolResult: must have required property 'content' (result of 'tools/call')";

const check = (id, status, extra = {}) => ({ id, name: id, description: id, status, ...extra });
const cancelled = (status = 'SUCCESS') => check('sep-2663-cancel-ack-empty-result', status);
const taskAnswer = { resultType: 'task', taskId: 't1', status: 'working' };
const violation = (errors, result = taskAnswer, context = "response to 'tools/call'") => ({
  origin: 'implementation',
  specVersion: '2026-07-28',
  context,
  errors,
  message: { jsonrpc: '2.0', id: 2, result },
});
const wire = (...violations) =>
  check('wire-schema-valid', violations.length ? 'FAILURE' : 'SUCCESS', {
    details: { messagesValidated: 3, violations },
  });

// run({scenario: [checks] | null}): summary.mjs's exit status and output; null: no checks.json.
function run(results) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'conformance-summary-test-'));
  try {
    for (const [scenario, checks] of Object.entries(results)) {
      const out = path.join(dir, scenario, `server-${scenario}-2026-12-08T00-00-00-000Z`);
      fs.mkdirSync(out, { recursive: true });
      if (checks) fs.writeFileSync(path.join(out, 'checks.json'), JSON.stringify(checks));
    }
    const r = spawnSync(process.execPath, [SUMMARY, dir, ...Object.keys(results)], { encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const cases = {
  'a #424-only wire-schema-valid failure is set aside; the cancel settled': () => {
    const r = run({
      'tasks-lifecycle': [check('a', 'SUCCESS'), cancelled(), wire(violation([MISSING_CONTENT]))],
      'tasks-wire-fields': [
        check('b', 'SUCCESS'),
        wire(violation([MISSING_CONTENT], taskAnswer, "SSE event during 'tools/call'")),
      ],
    });
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /settled `cancelled`/);
    assert.match(r.out, /Known upstream #424 .*, 2 violation\(s\)/);
    assert.match(r.out, /TOTAL: 3 passed, 0 failed, 0 skipped, 0 info\/warning; 2 wire-schema-valid/);
  },
  'skipped, info and warning checks do not fail': () => {
    const r = run({
      'tasks-lifecycle': [cancelled(), check('s', 'SKIPPED'), check('i', 'INFO'), check('w', 'WARNING')],
    });
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /TOTAL: 1 passed, 0 failed, 1 skipped, 2 info\/warning/);
  },
  'a failed check fails': () => {
    const r = run({ 'tasks-lifecycle': [cancelled(), check('x', 'FAILURE', { errorMessage: 'boom' })] });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /tasks-lifecycle: x \(x\): boom/);
  },
  'another CallToolResult error beside the missing content counts': () => {
    const other = "CallToolResult: /isError must be boolean (result of 'tools/call')";
    const r = run({ 'tasks-lifecycle': [cancelled(), wire(violation([MISSING_CONTENT, other]))] });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /1 violation\(s\) not explained by #424/);
  },
  'another CallToolResult error alone counts': () => {
    const r = run({
      'tasks-lifecycle': [cancelled(), wire(violation(["CallToolResult: /isError must be boolean (result of 'tools/call')"]))],
    });
    assert.equal(r.status, 1, r.out);
  },
  'a truncated error list counts': () => {
    const r = run({ 'tasks-lifecycle': [cancelled(), wire(violation([MISSING_CONTENT, '... 3 more errors']))] });
    assert.equal(r.status, 1, r.out);
  },
  'a missing content on an answer that is not a task counts': () => {
    const r = run({
      'tasks-lifecycle': [cancelled(), wire(violation([MISSING_CONTENT], { resultType: 'complete' }))],
    });
    assert.equal(r.status, 1, r.out);
  },
  'a #424-looking error on another method counts': () => {
    const r = run({
      'tasks-lifecycle': [cancelled(), wire(violation([MISSING_CONTENT], taskAnswer, "response to 'tasks/get'"))],
    });
    assert.equal(r.status, 1, r.out);
  },
  'a #424-only violation beside a real one fails, and names only the real one': () => {
    const real = violation(['TaskStatus: must be equal to one of the allowed values'], { status: 'done' });
    const r = run({ 'tasks-lifecycle': [cancelled(), wire(violation([MISSING_CONTENT]), real)] });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /1 violation\(s\) not explained by #424/);
    assert.match(r.out, /TaskStatus: must be equal/);
  },
  'a cancel that did not settle cancelled fails': () => {
    const r = run({
      'tasks-lifecycle': [
        check('a', 'SUCCESS'),
        cancelled('FAILURE'),
      ],
    });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /cancel of a running slow_compute .*: FAILURE/);
  },
  'tasks-lifecycle without its cancel check fails': () => {
    const r = run({ 'tasks-lifecycle': [check('a', 'SUCCESS')] });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /NOT RUN/);
  },
  'a scenario without results fails': () => {
    const r = run({ 'tasks-lifecycle': [cancelled()], 'tasks-wire-fields': null });
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /FAIL tasks-wire-fields: no results/);
  },
};

let failed = 0;
for (const [name, body] of Object.entries(cases)) {
  try {
    body();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e.message}`);
  }
}
console.log(`summary.test.mjs: ${Object.keys(cases).length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
