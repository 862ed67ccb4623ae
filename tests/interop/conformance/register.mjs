// Loaded with `node --import ./conformance/register.mjs` by conformance_tasks.sh, before the
// conformance CLI (@modelcontextprotocol/conformance, pinned in ../package.json).
//
// Why: the published 0.2.0-alpha.11 CLI (dist/index.js) imports `globSync` by name from 'fs'.
// Node added fs.globSync in 22; on Node 20 that named import is a link-time SyntaxError
// ("The requested module 'fs' does not provide an export named 'globSync'") which kills the
// whole CLI, although only its `tier-check` command calls globSync. On such a Node this
// registers a resolve hook (./hooks.mjs) that gives that one module ./fs-node20.mjs for 'fs':
// node:fs plus a globSync that throws if called. Nothing else is changed, and nothing at all
// on a Node that has fs.globSync.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./hooks.mjs', import.meta.url);
}
