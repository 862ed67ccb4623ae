// 'fs' as the conformance CLI sees it on Node < 22 (see ./register.mjs): all of node:fs, and a
// globSync, which only the CLI's `tier-check` command calls (conformance_tasks.sh never does).
import fs from 'node:fs';

export * from 'node:fs';
export default fs;

export function globSync() {
  throw new Error(
    `fs.globSync needs Node >= 22 (this is ${process.version}); ` +
      'tests/interop/conformance/ stubs it only so that the CLI loads'
  );
}
