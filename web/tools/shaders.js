// Compiling WGSL shaders on a WebGPU device as a check (no node APIs: the Tint check runs it
// in node on Dawn, test/chromium.mjs in Chromium). Any compilation message (error, warning or
// info) or a pipeline that cannot be made is a failure.

import { codeLines } from '../src/program.js';

/** A shader Tint must reject and naga accepts (a float literal beyond f32): proof that a host's check is live. */
export const CANARY = '@compute @workgroup_size(1)\nfn main() { let x = -3.4028235e38; }\n';

/** Shaders `[{ file, source }]` with texts equal but for comment lines kept once. */
export function distinct(shaders) {
  const seen = new Map();
  for (const s of shaders) {
    const key = codeLines(s.source);
    if (!seen.has(key)) seen.set(key, s);
  }
  return [...seen.values()];
}

/** Whether `device` rejects the canary. */
export async function rejectsCanary(device) {
  device.pushErrorScope('validation');
  const info = await device.createShaderModule({ code: CANARY }).getCompilationInfo();
  await device.popErrorScope();
  return info.messages.some((m) => m.type === 'error');
}

/** Compile each shader (entry `main`); the failures as `{ file, message }`, the header line included. */
export async function compileAll(device, shaders) {
  const failures = [];
  for (const { file, source } of shaders) {
    const fail = (what) => failures.push({ file, message: `${what}\n    (${source.split('\n')[0]})` });
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ code: source });
    const info = await module.getCompilationInfo();
    for (const m of info.messages) fail(`${m.lineNum}:${m.linePos} ${m.type}: ${m.message}`);
    try {
      await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main' } });
    } catch (e) {
      fail(`pipeline: ${e.message}`);
    }
    const err = await device.popErrorScope();
    if (err) fail(err.message);
  }
  return failures;
}

/** The limits a shader check asks for: the adapter's, for those a kernel can need. */
export function shaderLimits(adapter) {
  const limits = {};
  for (const k of ['maxStorageBuffersPerShaderStage', 'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX']) {
    limits[k] = adapter.limits[k];
  }
  return limits;
}
