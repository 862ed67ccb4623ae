// Resolve hook registered by ./register.mjs on a Node without fs.globSync (Node < 22): the
// conformance CLI's bundle, and only it, gets ./fs-node20.mjs when it imports 'fs'.
const CLI = '/node_modules/@modelcontextprotocol/conformance/dist/index.js';
const SHIM = new URL('./fs-node20.mjs', import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.endsWith(CLI)) {
    return { url: SHIM, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
