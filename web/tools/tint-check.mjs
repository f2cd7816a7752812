// Compile WGSL shaders with Tint, through Dawn (the `webgpu` npm package): a second validator
// beside naga, which checks every shader inside the compiler. Usage:
//   node web/tools/tint-check.mjs DIR...   (every *.wgsl under each DIR; texts equal but for comments count once)
// Any compilation message (error, warning or info) or a pipeline that cannot be made is a
// failure, reported with the file and the kernel's header line (tools/shaders.js, which
// test/chromium.mjs runs in Chromium too). Exit status 1 on any failure.
import { create } from 'webgpu';
import fs from 'node:fs';
import path from 'node:path';
import { compileAll, distinct, rejectsCanary, shaderLimits } from './shaders.js';

// Kept in a variable: Dawn's instance collected while its adapter lives crashes node.
const gpu = create([]);
const adapter = await gpu.requestAdapter();
if (!adapter) {
  console.error('tint-check: Dawn found no adapter (it needs a Vulkan driver it accepts: SwiftShader from chromium)');
  process.exit(2);
}
const device = await adapter.requestDevice({ requiredLimits: shaderLimits(adapter) });
if (!(await rejectsCanary(device))) {
  console.error('tint-check: Dawn accepted a shader Tint must reject (a float literal beyond f32): not a real check');
  process.exit(2);
}

const shaders = distinct(
  process.argv.slice(2).flatMap((dir) =>
    fs
      .readdirSync(dir)
      .sort()
      .filter((f) => f.endsWith('.wgsl'))
      .map((f) => ({ file: path.join(dir, f), source: fs.readFileSync(path.join(dir, f), 'utf8') })),
  ),
);
if (shaders.length === 0) {
  console.error(`tint-check: no .wgsl files under ${process.argv.slice(2).join(' ')}: nothing was checked`);
  process.exit(2);
}
const failures = await compileAll(device, shaders);
for (const f of failures) console.log(`${f.file}: ${f.message}`);
const failed = new Set(failures.map((f) => f.file)).size;
const name = adapter.info?.description || adapter.info?.device || 'an adapter';
console.log(`tint-check: ${shaders.length} distinct shaders compiled by Dawn (Tint) on ${name}: ${failed} failed`);
process.exit(failed ? 1 : 0);
