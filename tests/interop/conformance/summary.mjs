// Summary of a conformance_tasks.sh run: reads RESULTS/<scenario>/**/checks.json as written by
// the conformance CLI (`server -o RESULTS/<scenario>`) and prints one line per scenario, the
// checks set aside as upstream #424, the failures, and a total.
//
//   node conformance/summary.mjs RESULTS SCENARIO...
//
// Exit status 0 when no check failed (after the #424 carve-out, see is424) and, when
// tasks-lifecycle ran, its cancel of a running slow_compute settled `cancelled`; 1 otherwise.
import fs from 'node:fs';
import path from 'node:path';

const [resultsDir, ...scenarios] = process.argv.slice(2);
if (!resultsDir || scenarios.length === 0) {
  console.error('usage: node summary.mjs RESULTS SCENARIO...');
  process.exit(2);
}

const findChecks = (dir) =>
  fs.existsSync(dir)
    ? fs
        .readdirSync(dir, { recursive: true })
        .filter((p) => path.basename(p) === 'checks.json')
        .map((p) => path.join(dir, p))
    : [];

// Upstream #424 (fixed after alpha.11 by PR #468): `wire-schema-valid` checks a tools/call answer
// against CallToolResult even when it is a CreateTaskResult, which has no `content`. A violation is
// that defect, and only that, when all hold: the implementation sent it, it answers a tools/call,
// the answered result is `resultType: "task"`, and its one schema error is CallToolResult's missing
// `content`. Any other error (another CallToolResult field, a "... more errors" tail) counts.
const MISSING_CONTENT = "CallToolResult: must have required property 'content' (result of 'tools/call')";
const is424 = (v) =>
  v.origin === 'implementation' &&
  /'tools\/call'/.test(v.context ?? '') &&
  v.message?.result?.resultType === 'task' &&
  Array.isArray(v.errors) &&
  v.errors.length === 1 &&
  v.errors[0] === MISSING_CONTENT;

// The check that cancels a running slow_compute task and waits for its status to settle.
const CANCEL = { scenario: 'tasks-lifecycle', id: 'sep-2663-cancel-ack-empty-result' };

const total = { pass: 0, fail: 0, skip: 0, other: 0, known424: 0 };
const failures = [];
const known = [];
const lines = [];
let cancel = null;
for (const s of scenarios) {
  const files = findChecks(path.join(resultsDir, s));
  if (files.length === 0) {
    total.fail++;
    failures.push(`${s}: no checks.json (the scenario crashed or did not run)`);
    lines.push(`FAIL ${s}: no results`);
    continue;
  }
  const per = { pass: 0, fail: 0, skip: 0, other: 0, known424: 0 };
  for (const f of files) {
    for (const c of JSON.parse(fs.readFileSync(f, 'utf8'))) {
      if (s === CANCEL.scenario && c.id === CANCEL.id) cancel = c;
      if (c.id === 'wire-schema-valid' && c.status === 'FAILURE') {
        const vs = c.details?.violations ?? [];
        const k = vs.filter(is424);
        const rest = vs.filter((v) => !is424(v));
        for (const v of k) {
          known.push(`${s}: ${v.context}: ${v.errors.join('; ')} | result=${JSON.stringify(v.message.result)}`);
        }
        if (rest.length === 0 && k.length > 0) {
          per.known424++;
          continue;
        }
        per.fail++;
        failures.push(
          `${s}: wire-schema-valid: ${rest.length} violation(s) not explained by #424:\n` +
            rest
              .map(
                (v) =>
                  `      [${v.origin}] ${v.context}: ${(v.errors ?? []).join('; ')}\n` +
                  `        message: ${JSON.stringify(v.message)}`
              )
              .join('\n')
        );
        continue;
      }
      if (c.status === 'SUCCESS') per.pass++;
      else if (c.status === 'FAILURE') {
        per.fail++;
        failures.push(`${s}: ${c.id} (${c.name}): ${c.errorMessage ?? ''}`);
      } else if (c.status === 'SKIPPED') per.skip++;
      else per.other++;
    }
  }
  for (const k of Object.keys(total)) total[k] += per[k];
  lines.push(
    `${per.fail ? 'FAIL' : 'ok  '} ${s}: ${per.pass} passed, ${per.fail} failed, ${per.skip} skipped` +
      (per.other ? `, ${per.other} info/warning` : '') +
      (per.known424 ? ', wire-schema-valid = known #424 only' : '')
  );
}

console.log('================ conformance tasks summary ================');
for (const l of lines) console.log(l);
let cancelOk = true;
if (scenarios.includes(CANCEL.scenario)) {
  cancelOk = cancel?.status === 'SUCCESS';
  console.log(
    `\ncancel of a running slow_compute (${CANCEL.scenario} ${CANCEL.id}): ` +
      (cancel === null
        ? 'NOT RUN (the check is missing)'
        : cancelOk
          ? 'settled `cancelled`'
          : `${cancel.status}: ${cancel.errorMessage ?? ''}`)
  );
}
if (known.length) {
  console.log(
    `\nKnown upstream #424 (wire-schema-valid misreads a CreateTaskResult as CallToolResult; not counted), ${known.length} violation(s):`
  );
  for (const k of known) console.log('  - ' + k);
}
if (failures.length) {
  console.log(`\nFailures (${failures.length}):`);
  for (const f of failures) console.log('  - ' + f);
}
console.log(
  `\nTOTAL: ${total.pass} passed, ${total.fail} failed, ${total.skip} skipped, ${total.other} info/warning; ` +
    `${total.known424} wire-schema-valid check(s) failing only by #424 (not counted)`
);
process.exit(total.fail > 0 || !cancelOk ? 1 : 0);
