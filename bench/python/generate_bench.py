"""Hugging Face's side of the generation benchmark: prefill and decode times of
`model.generate` on the same checkpoints `rustral-bench generate` wrote (bench/results/lm/<model>/),
with the same prompt length, new tokens and threads, written as manifests of the bench schema
(target `hf-generate`) so that `rustral-bench report` puts them beside Rustral's.

    python bench/python/generate_bench.py --threads 2 --dir bench/results/lm --out bench/results/manifests

Prefill is `generate(max_new_tokens=1)` (the prompt's forward pass and one token); decode is
(`generate(max_new_tokens=1+N)` - prefill) / N per token, greedy, KV cache on, eager attention.
Needs torch and transformers; CI does not run it.
"""
import argparse, json, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--dir", default="bench/results/lm")
ap.add_argument("--out", default="bench/results/manifests")
ap.add_argument("--repeats", type=int, default=5)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--new", type=int, default=32)
ap.add_argument("--gguf", help="also time this GGUF file (dequantized to f32 by transformers) as the smollm2_q4_1 row")
args = ap.parse_args()

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

torch.set_num_threads(args.threads)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manifests import summary, machine, build  # noqa: E402


def generate_ms(model, ids, new):
    t = time.perf_counter()
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                       min_new_tokens=new, pad_token_id=0, eos_token_id=None)
    return (time.perf_counter() - t) * 1e3


def write(name, description, ts):
    m = dict(schema_version=1, unix_time=int(time.time()), workload=dict(name=name, kind="model", description=description),
             target="hf-generate", threads=args.threads,
             pipeline=dict(label="eager", level="eager", disabled=[], passes=[]), timings_ms=ts, stats=summary(ts),
             program=dict(kernels=0, dispatches=0, planned_peak_bytes=0, unplanned_bytes=0, kernel_ops={}), kernel_ms_by_op={},
             machine=machine(), build=build({"torch": torch.__version__, "transformers": transformers.__version__}))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{name}__hf-generate__{args.threads}t__eager.json")
    with open(path, "w") as f:
        json.dump(m, f, indent=2); f.write("\n")
    print(f"{name:>24} hf-generate {args.threads}t median {m['stats']['median_ms']:10.3f} ms", flush=True)


def time_model(model, model_name, ids):
    generate_ms(model, ids, 2)  # warm-up
    prefill = [generate_ms(model, ids, 1) for _ in range(args.repeats)]
    total = [generate_ms(model, ids, 1 + args.new) for _ in range(args.repeats)]
    p = sorted(prefill)[len(prefill) // 2]
    decode = [(t - p) / args.new for t in total]
    write(f"{model_name}_prefill", f"{model_name}: prefill of a {args.prompt}-token prompt (ms)", prefill)
    write(f"{model_name}_decode", f"{model_name}: one decode step after a {args.prompt}-token prompt, {args.new} tokens (ms per token)", decode)


if args.gguf:
    d, name = os.path.split(os.path.abspath(args.gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    # The prompt rustral-bench and bench/node/llama_bench.mjs use for this row.
    time_model(model, "smollm2_q4_1", torch.tensor([[100 + (i * 7919) % (vocab - 100) for i in range(args.prompt)]]))

for model_name in sorted(os.listdir(args.dir)) if os.path.isdir(args.dir) else []:
    path = os.path.join(args.dir, model_name)
    if not os.path.exists(os.path.join(path, "config.json")):
        continue
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    vocab = model.config.vocab_size
    time_model(model, model_name, torch.tensor([[(i * 7919) % vocab for i in range(args.prompt)]]))
