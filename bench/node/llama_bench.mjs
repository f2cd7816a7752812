// llama.cpp (through node-llama-cpp, pinned 3.21.1) on a GGUF file: prefill and greedy decode
// speed at batch 1, the peer row of `rustral-bench generate --gguf`. Usage:
//   node llama_bench.mjs MODEL.gguf THREADS PROMPT_TOKENS NEW_TOKENS REPEATS
// Prints one JSON object: prefill_ms and decode_ms_per_token (medians over REPEATS), and the
// token ids it generated (so the run can be checked against Rustral's greedy ids).
import { getLlama } from "node-llama-cpp";

const [model, threads, promptTokens, newTokens, repeats] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const vocab = 49152;
// The same synthetic prompt as the Rustral row: id i*7919 mod vocab, kept clear of the
// control tokens at the start of the vocabulary.
const prompt = Array.from({ length: Number(promptTokens) }, (_, i) => 100 + ((i * 7919) % (vocab - 100)));
const prefill = [], decode = [];
let ids = [];
for (let r = 0; r < Number(repeats); r++) {
  const ctx = await m.createContext({ threads: Number(threads), contextSize: 512, batchSize: 512, sequences: 1 });
  const seq = ctx.getSequence();
  ids = [];
  let t0 = performance.now(), tFirst = 0;
  for await (const tok of seq.evaluate(prompt, { temperature: 0 })) {
    const now = performance.now();
    if (ids.length === 0) tFirst = now;
    ids.push(tok);
    if (ids.length >= Number(newTokens)) break;
  }
  const tEnd = performance.now();
  prefill.push(tFirst - t0);
  decode.push((tEnd - tFirst) / (ids.length - 1));
  await ctx.dispose();
}
console.log(JSON.stringify({ peer: "llama.cpp", package: "node-llama-cpp@3.21.1", threads: Number(threads),
  prompt_tokens: prompt.length, new_tokens: ids.length, prefill_ms: median(prefill),
  decode_ms_per_token: median(decode), prefill_ms_all: prefill, decode_ms_all: decode, ids }));
process.exit(0);
