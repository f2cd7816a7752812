// The JS runtime in node on Dawn (the `webgpu` npm package; on a machine without a GPU, on
// SwiftShader: scripts/web-check.sh sets it up). RUSTRAL_WEB_DUMP names the folder of program
// folders the Rust tests wrote (tests/common: every test model at O0 and O2, and the real
// MiniLM), each with the CPU target's outputs to compare with.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { create } from 'webgpu';
import { Program, ProgramError, exceededLimit, loadFolder, parseSafetensors, requestDeviceFor, tensorValues } from '../src/index.js';
import { dirFolder } from '../src/node.js';
import { checkFolder } from './parity.js';

const dump = process.env.RUSTRAL_WEB_DUMP;
assert.ok(dump && fs.existsSync(dump), 'RUSTRAL_WEB_DUMP must name the program folders the Rust tests wrote (scripts/web-check.sh)');
const folders = fs
  .readdirSync(dump)
  .filter((d) => fs.existsSync(path.join(dump, d, 'check/expected.safetensors')))
  .sort();
// Kept in a variable: Dawn's instance collected while its adapter lives crashes node.
const gpu = create([]);
const adapter = await gpu.requestAdapter();
assert.ok(adapter, 'Dawn found no adapter');

test('the Rust tests wrote the programs of every test model at O0, O2 and O2 with ranges', () => {
  for (const model of ['mlp', 'bert', 'gpt2', 'llama', 'gpt2_loss']) {
    // O2-split: compiled for a binding half its largest parameter's size, so that parameter is bound in ranges.
    for (const level of ['O0', 'O2', 'O2-split']) assert.ok(folders.includes(`${model}-${level}`), `${model}-${level} in ${dump}`);
  }
});

for (const name of folders) {
  test(`${name} runs in Dawn within 1e-4 (1 + |x|) of the CPU target`, async () => {
    const r = await checkFolder(gpu, dirFolder(path.join(dump, name)));
    console.log(`${name}: ${r.values} values, worst ${r.worst.toExponential(2)}, ${r.kernels} kernels in ${r.pipelines} pipelines, run ${r.ms.toFixed(0)} ms`);
    assert.deepEqual(r.failures, []);
    assert.ok(r.values > 0);
  });
}

/** The tiny GPT-2 at O2, opened on a fresh device, with its check inputs. */
async function gpt2() {
  const folder = dirFolder(path.join(dump, 'gpt2-O2'));
  const files = await loadFolder(folder);
  const device = await requestDeviceFor(await gpu.requestAdapter(), files);
  const program = await Program.create(device, files);
  const feeds = {};
  for (const [n, t] of parseSafetensors(await folder.bytes('check/inputs.safetensors'))) feeds[n] = { shape: t.shape, data: tensorValues(t) };
  return { files, program, feeds };
}

const rejects = async (run, kind, pattern) => {
  await assert.rejects(run, (e) => {
    assert.ok(e instanceof ProgramError, `a ProgramError, not ${e}`);
    assert.equal(e.kind, kind, e.message);
    assert.match(e.message, pattern);
    return true;
  });
};

test('two programs on one device, run at once, each give their own answer', async () => {
  const open = async (name) => {
    const folder = dirFolder(path.join(dump, name));
    const files = await loadFolder(folder);
    const feeds = {};
    for (const [n, t] of parseSafetensors(await folder.bytes('check/inputs.safetensors'))) feeds[n] = { shape: t.shape, data: tensorValues(t) };
    return { files, feeds };
  };
  const a = await open('gpt2-O2');
  const b = await open('llama-O2');
  const adapter2 = await gpu.requestAdapter();
  const device = await requestDeviceFor(adapter2, a.files);
  // The sizes a run binds are the adapter's, not WebGPU's defaults.
  assert.equal(device.limits.maxStorageBufferBindingSize, adapter2.limits.maxStorageBufferBindingSize);
  const [pa, pb] = await Promise.all([Program.create(device, a.files), Program.create(device, b.files)]);
  const alone = [await pa.run(a.feeds), await pb.run(b.feeds)];
  const together = await Promise.all([pa.run(a.feeds), pb.run(b.feeds), pa.run(a.feeds)]);
  assert.deepEqual(together[0], alone[0]);
  assert.deepEqual(together[1], alone[1]);
  assert.deepEqual(together[2], alone[0]);
});

test('a layer repeated is one pipeline', async () => {
  const { files, program } = await gpt2();
  assert.ok(program.pipelineCount < files.program.kernels.length, `${program.pipelineCount} of ${files.program.kernels.length}`);
});

test('a token id past the vocabulary is an error naming the gather kernel, and the next good run works', async () => {
  const { program, feeds } = await gpt2();
  const good = await program.run(feeds);
  const ids = Int32Array.from(feeds.input_ids.data);
  ids[3] = 1_000_000;
  await rejects(() => program.run({ input_ids: { shape: feeds.input_ids.shape, data: ids } }), 'kernel', /kernel k\d+_gather .*index/);
  const again = await program.run(feeds);
  assert.deepEqual(again.out0.data, good.out0.data);
  // Runs asked for together take turns on the shared buffers: each gets its own answer.
  const short = { input_ids: { shape: [feeds.input_ids.shape[0], 2], data: feeds.input_ids.data.slice(0, 2 * feeds.input_ids.shape[0]) } };
  const [a, b, c] = await Promise.all([program.run(feeds), program.run(short), program.run(feeds)]);
  assert.deepEqual(a.out0.data, good.out0.data);
  assert.deepEqual(c.out0.data, good.out0.data);
  assert.deepEqual(b.out0.shape.slice(0, 2), short.input_ids.shape);
});

test('bad inputs are typed errors naming the input', async () => {
  const { program, feeds } = await gpt2();
  const shape = feeds.input_ids.shape;
  await rejects(() => program.run({}), 'input', /input input_ids: missing/);
  await rejects(() => program.run({ ...feeds, extra: feeds.input_ids }), 'input', /input extra: unknown \(the inputs are input_ids\)/);
  await rejects(() => program.run({ input_ids: { shape: [shape[0] * shape[1]], data: feeds.input_ids.data } }), 'input', /input input_ids: .*rank 1/);
  await rejects(() => program.run({ input_ids: { shape, data: feeds.input_ids.data.slice(1) } }), 'input', /input input_ids: 9 values for 10 elements/);
  const big = Float64Array.from(feeds.input_ids.data);
  big[0] = 2 ** 40;
  await rejects(() => program.run({ input_ids: { shape, data: big } }), 'input', /not a 32-bit integer/);
  // The symbolic dims rebind: a shorter sequence runs too.
  const short = await program.run({ input_ids: { shape: [shape[0], 2], data: feeds.input_ids.data.slice(0, 2 * shape[0]) } });
  assert.deepEqual(short.out0.shape.slice(0, 2), [shape[0], 2]);
});

test('a program over the limits names the limit and the kernel', async () => {
  const { files } = await gpt2();
  const e = exceededLimit(files, { ...adapter.limits, maxStorageBuffersPerShaderStage: 2 });
  assert.ok(e instanceof ProgramError);
  // The kernel's module path and the model line it computes (program.json's `loc`).
  assert.match(e.message, /^kernel k\d+_\w+ \(.* at ".*", [^ ]+\.rs:\d+:\d+( \(\+\d+ more\))?\): needs \d+ but the maxStorageBuffersPerShaderStage limit is 2$/);
  const small = { ...adapter.limits, maxStorageBufferBindingSize: 64 };
  assert.match(exceededLimit(files, small).message, /^kernel k\d+_\w+ \(.*\) binding \d+ \(\w+\): needs \d+ but the maxStorageBufferBindingSize limit is 64$/);
  const tiny = { ...adapter.limits, maxBufferSize: 64 };
  assert.match(exceededLimit(files, tiny).message, /^parameter .*: needs \d+ but the maxBufferSize limit is 64$/);
  assert.equal(exceededLimit(files, adapter.limits), null);
});

test('a range that leaves its buffer or its alignment is refused, naming the kernel and binding', async () => {
  const folder = dirFolder(path.join(dump, 'gpt2-O2-split'));
  const feeds = {};
  for (const [n, t] of parseSafetensors(await folder.bytes('check/inputs.safetensors'))) feeds[n] = { shape: t.shape, data: tensorValues(t) };
  for (const [shift, pattern] of [
    [4, /binds \d+ bytes at offset \d+ of a \d+-byte buffer \(a range must lie inside it and start at a multiple of \d+\)$/],
    [256, /binds \d+ bytes at offset \d+ of a \d+-byte buffer/],
  ]) {
    const files = await loadFolder(folder);
    const k = files.program.kernels.find((k) => k.bindings.some((b) => b.size > 4 && b.offset > 0));
    const b = k.bindings.find((b) => b.size > 4 && b.offset > 0);
    b.offset += shift;
    const device = await requestDeviceFor(await gpu.requestAdapter(), files);
    const program = await Program.create(device, files);
    await rejects(() => program.run(feeds), 'format', new RegExp(`^kernel ${k.name} .* binding ${b.binding} \\(${b.name}\\): ${pattern.source}`));
    program.destroy();
  }
});

test('a folder of another format version or with a broken parameter file is refused', async () => {
  const base = dirFolder(path.join(dump, 'gpt2-O2'));
  const edited = (name, change) => ({ ...base, text: async (n) => (n === name ? change(await base.text(n)) : base.text(n)), bytes: base.bytes });
  await rejects(() => loadFolder(edited('program.json', (t) => t.replace('"version": 3', '"version": 4'))), 'format', /version 4 \(this runtime reads rustral-wgsl-program version 3\)/);
  await rejects(() => loadFolder(edited('program.json', (t) => t.replace(/"name": "(k000_\w+)"/, '"name": "../$1"'))), 'format', /kernel name/);
  const truncated = { ...base, bytes: async (n) => (await base.bytes(n)).subarray(0, 100) };
  await rejects(() => loadFolder(truncated), 'format', /params.safetensors: /);
  assert.throws(() => parseSafetensors(new Uint8Array(4)), /too short/);
});

test('a shader Tint rejects is an error naming the kernel and the line', async () => {
  const base = dirFolder(path.join(dump, 'mlp-O2'));
  const files = await loadFolder(base);
  const device = await requestDeviceFor(await gpu.requestAdapter(), files);
  files.shaders[0] = files.shaders[0].replace(/fn main/, 'fn main() { let x: f32 = -3.4028236e38; }\nfn unused');
  await rejects(() => Program.create(device, files), 'shader', /^kernel k000_\w+ \(.*\): k000_\w+\.wgsl:\d+:\d+: .*cannot be represented as 'f32'$/);
});
