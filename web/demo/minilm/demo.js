// The MiniLM demo: sentences in, WordPiece ids (src/wordpiece.js), the compiled program run on
// the browser's WebGPU (src/program.js), mean-pooled embeddings out, their cosine similarity
// shown as a matrix. `?program=URL` names the program folder (default: /program/, as
// scripts/web-demo.sh serves it); it holds vocab.txt beside program.json. The last result is
// kept in `window.demo` for the headless test (web/test/chromium.mjs).

import { openProgram, urlFolder } from '../../src/index.js';
import { WordPiece } from '../../src/wordpiece.js';

const $ = (id) => document.getElementById(id);
const status = (text, state) => {
  $('status').textContent = text;
  if (state) document.body.dataset.state = state;
};
const demo = (window.demo = { result: null, error: null });

/** Cosine similarity of the rows of a [n, d] matrix. */
function cosine(data, n, d) {
  const unit = [];
  for (let i = 0; i < n; i++) {
    const row = data.subarray(i * d, (i + 1) * d);
    const norm = Math.hypot(...row) || 1;
    unit.push(Array.from(row, (x) => x / norm));
  }
  return unit.map((a) => unit.map((b) => a.reduce((s, x, k) => s + x * b[k], 0)));
}

function render(texts, sim) {
  const table = $('matrix');
  table.replaceChildren();
  const head = table.insertRow();
  head.appendChild(document.createElement('th'));
  texts.forEach((_, j) => {
    const th = document.createElement('th');
    th.textContent = String(j + 1);
    head.appendChild(th);
  });
  sim.forEach((row, i) => {
    const tr = table.insertRow();
    const th = document.createElement('th');
    th.className = 'sentence';
    th.textContent = `${i + 1}. ${texts[i]}`;
    th.title = texts[i];
    tr.appendChild(th);
    row.forEach((v) => {
      const td = tr.insertCell();
      td.textContent = v.toFixed(3);
      const t = Math.max(0, Math.min(1, v));
      td.style.background = `hsl(212 80% ${Math.round(97 - 52 * t)}%)`;
      td.style.color = t > 0.6 ? '#fff' : '#1d232a';
    });
  });
}

async function main() {
  if (!navigator.gpu) throw new Error('this browser has no WebGPU (navigator.gpu); try Chrome or Edge 113+, or --enable-unsafe-webgpu');
  const base = new URLSearchParams(location.search).get('program') ?? '/program/';
  const folder = urlFolder(base);
  const started = performance.now();
  const [vocab, program] = await Promise.all([folder.text('vocab.txt'), openProgram(navigator.gpu, folder)]);
  const tokenizer = new WordPiece(vocab);
  const load = performance.now() - started;
  const info = (await navigator.gpu.requestAdapter())?.info;
  $('device').textContent = `${program.program.kernels.length} kernels (${program.pipelineCount} distinct shaders), loaded in ${(load / 1000).toFixed(1)} s on ${[info?.vendor, info?.architecture, info?.description].filter(Boolean).join(' ') || 'a WebGPU adapter'}.`;
  const compare = async () => {
    const texts = $('sentences').value.split('\n').map((s) => s.trim()).filter(Boolean);
    if (!texts.length) return status('type a sentence first');
    $('compare').disabled = true;
    status('running…', 'running');
    try {
      const feeds = tokenizer.batch(texts);
      const t0 = performance.now();
      const out = await program.run(feeds, { only: ['sentence_embedding'] });
      const ms = performance.now() - t0;
      const e = out.sentence_embedding;
      const sim = cosine(e.data, e.shape[0], e.shape[1]);
      render(texts, sim);
      demo.result = { texts, ids: Array.from(feeds.input_ids.data), shape: feeds.input_ids.shape, embeddings: Array.from(e.data), similarity: sim, ms };
      status(`${texts.length} sentences, ${feeds.input_ids.shape[1]} tokens each (padded), in ${ms.toFixed(0)} ms`, 'done');
    } catch (err) {
      demo.error = String(err);
      status(String(err), 'error');
    } finally {
      $('compare').disabled = false;
    }
  };
  $('compare').addEventListener('click', compare);
  $('compare').disabled = false;
  status('ready', 'ready');
}

main().catch((err) => {
  demo.error = String(err);
  status(String(err), 'error');
});
