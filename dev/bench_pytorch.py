"""
PyTorch's speed on the trainer's benchmark configs, for `make bench` to print
beside ours in the same run (dev/bench.sh): the same GPT-2 (pre-LayerNorm,
tied LM head over the vocabulary padded to 50304, GELU tanh, causal
attention), the same batch, AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on the 2-D weights) and clipping of the global grad norm at
1.0, on this machine's cores (torch.set_num_threads), from random init, on
tokens of the Brown training shard (random tokens when it is missing).

  /usr/bin/python3 dev/bench_pytorch.py --layers 6 --heads 6 --channels 384 -b 4 -t 256 --steps 8 --dtype fp32
  ... --dtype bf16   (torch.autocast on the CPU with bfloat16: the matmuls in bf16, fp32 weights and AdamW)

Prints one line that dev/bench.sh reads:
  pytorch <dtype> ms <mean ms/step of steps 2..steps> tok/s <tokens/s> torch <version> threads <n>
Timing means something only on a quiet machine (bench.sh prints the load).
"""

import argparse
import math
import os
import sys
import time

from pyreq import require
if __name__ == "__main__":
    require("numpy", "torch")
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, Vp, maxT):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        self.register_buffer("mask", ~torch.ones(maxT, maxT, dtype=torch.bool).tril(), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("attproj.weight") or n.endswith("fcproj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head over Vp
        return F.cross_entropy(logits.float().view(B * T, -1), targets.view(B * T))


def batches(B, T, V):
    path = "data/brown/brown_train_000000.bin"
    if os.path.exists(path):
        tok = np.fromfile(path, dtype="<u2", offset=1024).astype(np.int64)
    else:
        tok = np.random.default_rng(0).integers(0, V, size=1 << 20)
    n = B * T + 1
    pos = 0
    while True:
        if pos + n > len(tok):
            pos = 0
        s = torch.from_numpy(tok[pos:pos + n].copy())
        pos += B * T
        yield s[:-1].view(B, T), s[1:].view(B, T)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--channels", type=int, default=384)
    ap.add_argument("-b", type=int, default=4)
    ap.add_argument("-t", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.steps < 2:
        sys.exit("error: --steps must be >= 2 (step 1 warms up and is not timed)")
    torch.manual_seed(1337)
    torch.set_num_threads(a.threads)
    V, Vp, maxT = 50257, 50304, max(1024, a.t)
    model = GPT(a.layers, a.heads, a.channels, Vp, maxT)
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    data = batches(a.b, a.t, V)
    times = []
    for step in range(a.steps):
        x, y = next(data)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        if step > 0:
            times.append(dt)
        if not math.isfinite(loss.item()):
            sys.exit(f"error: loss became {loss.item()} at step {step + 1}")
    ms = 1000.0 * sum(times) / len(times)
    print(f"pytorch {a.dtype} ms {ms:.1f} tok/s {a.b * a.t / (ms / 1000.0):.1f} torch {torch.__version__} threads {a.threads} "
          f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
