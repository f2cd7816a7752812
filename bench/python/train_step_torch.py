"""PyTorch eager: one training step (forward, backward, AdamW) of a GPT-2-small block, batch 8 x
seq 128, loss mean(y^2): the comparison for `cargo bench -p rustral-bench --bench train_step`.
The block is the one in fixtures/perf/torch_anchors.py.

    python bench/python/train_step_torch.py --threads 2
"""
import argparse, math, statistics, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--reps", type=int, default=10)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d=768, h=12, mlp=3072):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d); self.qkv = nn.Linear(d, 3 * d); self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d); self.fc = nn.Linear(d, mlp); self.fc2 = nn.Linear(mlp, d)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


blk = Block()
x = torch.randn(8, 128, 768)
opt = torch.optim.AdamW(blk.parameters(), lr=1e-4)


def step():
    opt.zero_grad(set_to_none=True)
    loss = blk(x).square().mean()
    loss.backward()
    opt.step()


for _ in range(3):
    step()
times = []
for _ in range(args.reps):
    t0 = time.perf_counter(); step(); times.append((time.perf_counter() - t0) * 1e3)
print(f"torch {torch.__version__} eager, {args.threads} thread(s): train step median {statistics.median(times):.1f} ms "
      f"(min {min(times):.1f}, max {max(times):.1f}, {args.reps} reps)")
