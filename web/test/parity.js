// One program folder with its parity data (check/inputs.safetensors, check/expected.safetensors:
// the CPU target's outputs, written by the Rust tests with RUSTRAL_WEB_DUMP) run by the JS
// runtime and compared value by value: |got - want| <= tolerance * (1 + |want|). Shared by the
// node tests (Dawn) and the Chromium page (test/browser.html).

import { Program, loadFolder, parseSafetensors, requestDeviceFor, tensorValues } from '../src/index.js';

export async function checkFolder(gpu, folder, tolerance = 1e-4) {
  const files = await loadFolder(folder);
  const adapter = await gpu.requestAdapter();
  const device = await requestDeviceFor(adapter, files);
  const program = await Program.create(device, files);
  const inputs = parseSafetensors(await folder.bytes('check/inputs.safetensors'));
  const expected = parseSafetensors(await folder.bytes('check/expected.safetensors'));
  const feeds = {};
  for (const [name, t] of inputs) feeds[name] = { shape: t.shape, data: tensorValues(t) };
  const started = performance.now();
  const got = await program.run(feeds);
  const ms = performance.now() - started;
  const failures = [];
  let worst = 0;
  let values = 0;
  for (const [name, t] of expected) {
    const g = got[name];
    if (!g) {
      failures.push(`${name}: not an output of the program`);
      continue;
    }
    if (g.shape.join(',') !== t.shape.join(',')) {
      failures.push(`${name}: shape [${g.shape}] where the CPU target gives [${t.shape}]`);
      continue;
    }
    const want = tensorValues(t);
    for (let i = 0; i < want.length; i++) {
      const w = Number(want[i]);
      const v = Number(g.data[i]);
      values++;
      if (v === w || (Number.isNaN(v) && Number.isNaN(w))) continue;
      const d = Math.abs(v - w);
      worst = Math.max(worst, d / (1 + Math.abs(w)));
      if (!(d <= tolerance * (1 + Math.abs(w)))) {
        if (failures.length < 5) failures.push(`${name}[${i}]: ${v} where the CPU target gives ${w}`);
        else if (failures.length === 5) failures.push('...');
      }
    }
  }
  if (Object.keys(got).length !== expected.size) failures.push(`${Object.keys(got).length} outputs, the CPU target gives ${expected.size}`);
  const report = {
    folder: folder.name,
    kernels: files.program.kernels.length,
    pipelines: program.pipelineCount,
    values,
    worst,
    ms,
    failures,
  };
  program.destroy();
  device.destroy();
  return report;
}
