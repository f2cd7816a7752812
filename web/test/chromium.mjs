// The JS runtime in headless Chromium (its WebGPU on SwiftShader where there is no GPU):
// every program folder the Rust tests wrote (RUSTRAL_WEB_DUMP) run by test/browser.html
// against the CPU target's outputs, then the MiniLM demo page (demo/minilm) driven as a user
// would: it must tokenize the parity sentences as Hugging Face's tokenizer does, and its
// embeddings and similarity matrix must match sentence-transformers' (fixtures/minilm) and the
// CPU target's within 1e-4. With RUSTRAL_WGSL_DUMP (scripts/test.sh sets it) every shader the
// tests emitted is compiled there too, as the Tint check does in Dawn.
// RUSTRAL_WEB_SCREENSHOT=FILE saves the page (the README's picture). The explorer page of
// rustral-compile --emit html (tests/compile_cli.rs leaves it in RUSTRAL_WEB_DUMP/explorer) is
// rendered and checked too.
// Exit status 1 on any failure. Usage: node test/chromium.mjs (CHROMIUM names the browser).

import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import { parseSafetensors, tensorValues } from '../src/index.js';
import { WEB, serve } from '../tools/serve.mjs';
import { distinct } from '../tools/shaders.js';

const dump = process.env.RUSTRAL_WEB_DUMP;
if (!dump || !fs.existsSync(dump)) {
  console.error('chromium: RUSTRAL_WEB_DUMP must name the program folders the Rust tests wrote');
  process.exit(2);
}
const folders = fs
  .readdirSync(dump)
  .filter((d) => fs.existsSync(path.join(dump, d, 'check/expected.safetensors')))
  .sort();
const fixtures = path.join(WEB, '../fixtures/minilm');
const server = await serve({ '/': WEB, '/programs/': dump });
const origin = `http://localhost:${server.address().port}`;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  protocolTimeout: 900_000,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-angle=swiftshader', '--use-webgpu-adapter=swiftshader'],
});
const failures = [];
const fail = (what) => {
  failures.push(what);
  console.log(`FAIL ${what}`);
};
try {
  console.log(`chromium: ${await browser.version()}`);
  const page = await browser.newPage();
  const log = [];
  page.on('console', (m) => log.push(m.text()));
  page.on('pageerror', (e) => log.push(String(e)));
  await page.goto(`${origin}/test/browser.html`);
  await page.waitForFunction(() => window.ready === true, { timeout: 60_000 });
  for (const name of folders) {
    try {
      const r = await page.evaluate((n) => window.check(n), name);
      const line = `${name}: ${r.values} values, worst ${r.worst.toExponential(2)}, ${r.kernels} kernels in ${r.pipelines} pipelines, run ${r.ms.toFixed(0)} ms`;
      if (r.failures.length || r.values === 0) fail(`${line}: ${r.failures.join('; ') || 'no values compared'}`);
      else console.log(`ok ${line}`);
    } catch (e) {
      fail(`${name}: ${e.message}\n${log.join('\n')}`);
    }
  }
  const dumped = process.env.RUSTRAL_WGSL_DUMP;
  if (dumped) {
    // The shaders of every test (random graphs too), as the Tint check compiles them in Dawn.
    const files = fs.readdirSync(dumped).filter((f) => f.endsWith('.wgsl')).sort();
    const shaders = distinct(files.map((f) => ({ file: f, source: fs.readFileSync(path.join(dumped, f), 'utf8') })));
    let bad = 0;
    for (let i = 0; i < shaders.length; i += 100) {
      const failed = await page.evaluate((list) => window.compileShaders(list), shaders.slice(i, i + 100));
      for (const f of failed) fail(`shader ${f.file}: ${f.message}`);
      bad += failed.length;
    }
    if (shaders.length === 0) fail(`no shaders in RUSTRAL_WGSL_DUMP=${dumped}`);
    else console.log(`${bad ? 'FAIL' : 'ok'} ${shaders.length} distinct shaders compiled by Chromium: ${bad} messages`);
  }
  if (!fs.existsSync(path.join(dump, 'explorer/explorer.html'))) {
    fail('no explorer/explorer.html in RUSTRAL_WEB_DUMP (tests/compile_cli.rs writes it): the explorer page was not tested');
  } else {
    await explorer(await browser.newPage());
  }
  if (!folders.includes('minilm-real')) {
    fail('no minilm-real program in RUSTRAL_WEB_DUMP (tests/minilm_targets.rs writes it): the demo was not tested');
  } else {
    await demo(await browser.newPage());
  }
} finally {
  await browser.close();
  server.close();
}
console.log(`chromium: ${folders.length} programs, the explorer page and the MiniLM demo: ${failures.length} failures`);
process.exit(failures.length ? 1 : 0);

// rustral-compile --emit html's page, as a user opens it: it must render with no script error,
// show a row per kernel, a box per drawn node with the fused ones marked, a button per pass,
// filter by source line, and look like something (its picture much larger than a blank page's).
// RUSTRAL_EXPLORER_SCREENSHOT=FILE saves the picture.
async function explorer(page) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.setViewport({ width: 1200, height: 900 });
  const blank = await page.screenshot();
  await page.goto(`${origin}/programs/explorer/explorer.html`);
  await page.waitForFunction(() => window.explorer !== undefined, { timeout: 60_000 });
  const r = await page.evaluate(() => {
    const { data, filter } = window.explorer;
    const rows = () => [...document.querySelectorAll('#kernels tbody tr')].filter((tr) => tr.offsetParent !== null).length;
    const shown = rows();
    const fused = [...document.querySelectorAll('#graph .node.fused rect')].filter((r) => r.getBBox().width > 0).length;
    // One line inside the GELU's lines, as a reader types it (the file's last part): only that
    // kernel stays; a line no kernel computes leaves none.
    const gelu = data.kernels.find((k) => k.op === 'gelu');
    const line = gelu.lines[1].split('/').pop();
    document.getElementById('search').value = line;
    filter();
    const filtered = rows();
    const marked = document.querySelectorAll('#ir mark').length;
    document.getElementById('search').value = line.replace(/:\d+$/, ':1');
    filter();
    const none = rows();
    document.getElementById('search').value = '';
    filter();
    return {
      kernels: data.kernels.length,
      shown,
      fused,
      fusedKernels: data.kernels.filter((k) => k.check).length,
      buttons: document.querySelectorAll('#stages button').length,
      stages: data.stages.length,
      filtered,
      marked,
      none,
      diffLines: document.querySelectorAll('#diff .add, #diff .del').length,
    };
  });
  const picture = await page.screenshot({ fullPage: true });
  const what = `explorer: ${r.kernels} kernels shown ${r.shown}, ${r.fused} fused nodes drawn, ${r.buttons} of ${r.stages} passes, filter by a line leaves ${r.filtered} (${r.marked} IR lines marked, ${r.none} for a line no kernel computes), ${r.diffLines} diff lines, picture ${picture.length} bytes (blank ${blank.length})`;
  if (errors.length) fail(`explorer: ${errors.join('; ')}`);
  else if (r.kernels === 0 || r.shown !== r.kernels || r.fused !== r.fusedKernels || r.fused === 0 || r.buttons !== r.stages || r.filtered !== 1 || r.marked === 0 || r.none !== 0 || r.diffLines === 0 || picture.length < 4 * blank.length) fail(what);
  else console.log(`ok ${what}`);
  const shot = process.env.RUSTRAL_EXPLORER_SCREENSHOT;
  if (shot) {
    fs.writeFileSync(shot, picture);
    console.log(`explorer: screenshot ${shot}`);
  }
}

async function demo(page) {
  const log = [];
  page.on('console', (m) => log.push(m.text()));
  page.on('pageerror', (e) => log.push(String(e)));
  await page.setViewport({ width: 1000, height: 640 });
  await page.goto(`${origin}/demo/minilm/?program=/programs/minilm-real/`);
  const state = () => page.evaluate(() => document.body.dataset.state);
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), { timeout: 600_000 });
  if ((await state()) !== 'ready') return fail(`demo: ${await page.evaluate(() => window.demo.error)}\n${log.join('\n')}`);
  await page.click('#compare');
  await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.state), { timeout: 600_000 });
  const r = await page.evaluate(() => window.demo.result);
  if (!r) return fail(`demo: ${await page.evaluate(() => window.demo.error)}\n${log.join('\n')}`);
  const tokens = JSON.parse(fs.readFileSync(path.join(fixtures, 'tokens.json'), 'utf8'));
  const reference = JSON.parse(fs.readFileSync(path.join(fixtures, 'embeddings.json'), 'utf8'));
  if (JSON.stringify(r.texts) !== JSON.stringify(tokens.sentences)) return fail('demo: the page does not start with the parity sentences');
  if (JSON.stringify(r.ids) !== JSON.stringify(tokens.input_ids.flat())) fail('demo: token ids differ from Hugging Face tokenizers (fixtures/minilm/tokens.json)');
  const close = (what, got, want, tol) => {
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
    if (!(worst <= tol) || got.length !== want.length) fail(`demo: ${what}: worst ${worst} over ${tol} (${got.length} values against ${want.length})`);
    else console.log(`ok demo: ${what}: worst ${worst.toExponential(2)}`);
  };
  const expected = parseSafetensors(fs.readFileSync(path.join(dump, 'minilm-real/check/expected.safetensors')));
  close('embeddings against the CPU target', r.embeddings, Array.from(tensorValues(expected.get('sentence_embedding'))), 1e-4);
  close('embeddings against sentence-transformers', r.embeddings, reference.embeddings.flat(), 1e-4);
  close('similarity against sentence-transformers', r.similarity.flat(), reference.cosine_similarity.flat(), 1e-4);
  console.log(`demo: ${r.texts.length} sentences in ${r.ms.toFixed(0)} ms`);
  const shot = process.env.RUSTRAL_WEB_SCREENSHOT;
  if (shot) {
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`demo: screenshot ${shot}`);
  }
}
