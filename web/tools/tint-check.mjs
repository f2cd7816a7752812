// Compile WGSL shaders with Tint, through Dawn (the `webgpu` npm package): a second validator
// beside naga, which checks every shader inside the compiler. Usage:
//   node web/tools/tint-check.mjs DIR...   (every *.wgsl under each DIR; texts equal but for comments count once)
// Any compilation message (error, warning or info) or a pipeline that cannot be made is a
// failure, reported with the file and the kernel's header line. Exit status 1 on any failure.
import { create, globals } from 'webgpu';
import fs from 'node:fs';
import path from 'node:path';

Object.assign(globalThis, globals);
const gpu = create([]);
const adapter = await gpu.requestAdapter();
if (!adapter) {
  console.error('tint-check: Dawn found no adapter (it needs a Vulkan driver it accepts: SwiftShader from chromium)');
  process.exit(2);
}
const limits = {};
for (const k of ['maxStorageBuffersPerShaderStage', 'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX']) {
  limits[k] = adapter.limits[k];
}
const device = await adapter.requestDevice({ requiredLimits: limits });

// A canary Tint must reject (naga accepts it): proof that this validator is not a no-op.
device.pushErrorScope('validation');
const canary = device.createShaderModule({ code: '@compute @workgroup_size(1)\nfn main() { let x = -3.4028235e38; }\n' });
const canaryInfo = await canary.getCompilationInfo();
await device.popErrorScope();
if (!canaryInfo.messages.some((m) => m.type === 'error')) {
  console.error('tint-check: Dawn accepted a shader Tint must reject (a float literal beyond f32): not a real check');
  process.exit(2);
}

const shaders = new Map();
for (const dir of process.argv.slice(2)) {
  for (const f of fs.readdirSync(dir).sort()) {
    if (!f.endsWith('.wgsl')) continue;
    const file = path.join(dir, f);
    const source = fs.readFileSync(file, 'utf8');
    const key = source.split('\n').filter((l) => !l.trim().startsWith('//')).join('\n');
    if (!shaders.has(key)) shaders.set(key, { file, source });
  }
}

if (shaders.size === 0) {
  console.error(`tint-check: no .wgsl files under ${process.argv.slice(2).join(' ')}: nothing was checked`);
  process.exit(2);
}

const failed = new Set();
const fail = (file, source, what) => {
  failed.add(file);
  const head = source.split('\n')[0];
  console.log(`${file}: ${what}\n    (${head})`);
};
for (const { file, source } of shaders.values()) {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code: source });
  const info = await module.getCompilationInfo();
  for (const m of info.messages) fail(file, source, `${m.lineNum}:${m.linePos} ${m.type}: ${m.message}`);
  try {
    await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  } catch (e) {
    fail(file, source, `pipeline: ${e.message}`);
  }
  const err = await device.popErrorScope();
  if (err) fail(file, source, err.message);
}
const name = adapter.info?.description || adapter.info?.device || 'an adapter';
console.log(`tint-check: ${shaders.size} distinct shaders compiled by Dawn (Tint) on ${name}: ${failed.size} failed`);
process.exit(failed.size ? 1 : 0);
