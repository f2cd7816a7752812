"""llama.cpp's side of the GGUF generation row: prefill and decode of the same GGUF file, batch 1,
with the same prompt ids and threads as `rustral-bench generate --gguf`, through node-llama-cpp
(pinned 3.21.1; installed into bench/node/ on first use with `npm i -E`), written as manifests of
the bench schema (target `llama.cpp`) that `rustral-bench report` puts beside Rustral's.

    python bench/python/llama_cpp_bench.py --gguf "$(bash scripts/fetch-smollm2.sh)" --threads 1

Needs node and npm; CI does not run it."""
import argparse, json, os, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--gguf", required=True)
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--out", default="bench/results/manifests")
ap.add_argument("--repeats", type=int, default=3)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--new", type=int, default=32)
args = ap.parse_args()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from manifests import ROOT, summary, machine, build  # noqa: E402

NODE = os.path.join(ROOT, "bench", "node")
if not os.path.isdir(os.path.join(NODE, "node_modules", "node-llama-cpp")):
    subprocess.run(["npm", "i", "-E", "--no-audit", "--no-fund", "node-llama-cpp@3.21.1"], cwd=NODE, check=True)
run = subprocess.run(["node", "llama_bench.mjs", os.path.abspath(args.gguf), str(args.threads), str(args.prompt),
                      str(args.new + 1), str(args.repeats)], cwd=NODE, check=True, capture_output=True, text=True)
r = json.loads(run.stdout.strip().splitlines()[-1])
row = "smollm2_q4_1"
for phase, ts, what in [
    ("prefill", r["prefill_ms_all"], f"{row}: prefill of a {args.prompt}-token prompt (ms)"),
    ("decode", r["decode_ms_all"], f"{row}: one decode step after a {args.prompt}-token prompt, {args.new} tokens (ms per token)"),
]:
    m = dict(schema_version=1, unix_time=int(time.time()), workload=dict(name=f"{row}_{phase}", kind="model", description=what),
             target="llama.cpp", threads=args.threads,
             pipeline=dict(label="llama.cpp", level="llama.cpp", disabled=[], passes=[]), timings_ms=ts, stats=summary(ts),
             program=dict(kernels=0, dispatches=0, planned_peak_bytes=0, unplanned_bytes=0, kernel_ops={}), kernel_ms_by_op={},
             machine=machine("llama.cpp"), build=build({"node-llama-cpp": r["package"]}))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{row}_{phase}__llama.cpp__{args.threads}t__llama.cpp.json")
    with open(path, "w") as f:
        json.dump(m, f, indent=2); f.write("\n")
    print(f"{row}_{phase:>8} llama.cpp {args.threads}t median {m['stats']['median_ms']:10.3f} ms", flush=True)
