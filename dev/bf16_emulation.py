"""
float64 emulation of the bf16 programs' storage (what the bf16 CPU program,
./train_gpt_cpu_bf16, and the CUDA program round), to derive the bf16
tolerances of test_gpt.cu and to check that the CPU program's errors are
those of bf16 storage and nothing else.

For a reference config (dev/reference.py's files: NAME_model.bin and
NAME_debug_state.bin) it runs one forward and backward of the model in
float64 with a round to bf16 (nearest even) at every point where the bf16
programs store a value (llmc/cpu/*.h, llmc/cuda/*.cuh):
  - every parameter, once, when loaded;
  - forward: the embedding sum, both LayerNorm outputs and the final one,
    qkv, preatt (the scaled scores), att (the softmax), the attention
    output, the attention projection, both residual sums, fc, GELU, fcproj,
    and the logits;
  - backward: the gradient arriving at each of those tensors (the programs
    store it once: a sum of contributions is rounded once), dlogits, the
    LM-head gradient of lnf accumulated vocabulary chunk by chunk (one
    rounding per chunk: gpt.h's --vocab-chunk, default 8192 rows), every
    parameter gradient once, and wte's as round(round(LM head) +
    round(embedding)) (llmc/cpu/encoder.h, embedding_backward_range).
Sums are float64 here (fp32 in the programs); that difference is far below
the bf16 roundings. It prints, per tensor, the error of the emulation
against the float64 reference in test_gpt's measures (logits: max absolute;
loss: absolute; gradients: max error / max |reference| per tensor).
If the CPU bf16 program rounds where this script does, test_gpt_cpu_bf16's
errors agree with these to within what the fp32 sums and rounding ties move
(compare: ./test_gpt_cpu_bf16 prints the same measures).

usage: /usr/bin/python3 dev/bf16_emulation.py [--dir data/ref] [--config small|odd|tiny|all]
       [--vocab-chunk 8192]
"""
import os as _os
import sys as _sys
from pyreq import require
if __name__ == "__main__":
    require('numpy', 'torch')

import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import PARAM_NAMES, padded_vocab  # noqa: E402

torch.set_default_dtype(torch.float64)


def rb(x):
    """x (float64 tensor) rounded to bf16 (nearest even, via fp32), as float64."""
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


class Store(torch.autograd.Function):
    """A stored bf16 tensor: rounds the value forward and the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return rb(x)

    @staticmethod
    def backward(ctx, g):
        return rb(g)


S = Store.apply


class LMHead(torch.autograd.Function):
    """logits = lnf @ wte[:V]^T (rounded); backward: dlnf accumulated chunk by
    chunk of `chunk` vocabulary rows with one rounding per chunk (matmul_backward
    into dlnf per chunk), dwte rows rounded once; the incoming dlogits are
    already rounded (Store after this)."""

    @staticmethod
    def forward(ctx, lnf, wte, chunk):
        ctx.save_for_backward(lnf, wte)
        ctx.chunk = chunk
        return lnf @ wte.t()

    @staticmethod
    def backward(ctx, g):
        lnf, wte = ctx.saved_tensors
        V = wte.shape[0]
        dlnf = torch.zeros_like(lnf)
        for c0 in range(0, V, ctx.chunk):
            c1 = min(V, c0 + ctx.chunk)
            dlnf = rb(dlnf + g[..., c0:c1] @ wte[c0:c1])
        dwte = rb(g.reshape(-1, V).t() @ lnf.reshape(-1, lnf.shape[-1]))
        return dlnf, dwte, None


def read_model(path):
    h = np.fromfile(path, dtype="<i4", count=256)
    assert h[0] == 20240326 and h[1] == 3, f"{path}: not an fp32 llm.c checkpoint"
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    cfg = dict(maxT=maxT, V=V, L=L, NH=NH, C=C)
    from reference import param_shapes
    shapes = param_shapes(cfg)
    data = np.fromfile(path, dtype="<f4", offset=256 * 4)
    params, off = {}, 0
    for name in PARAM_NAMES:
        n = int(np.prod(shapes[name]))
        params[name] = torch.from_numpy(data[off:off + n].astype(np.float64)).view(shapes[name])
        off += n
    return cfg, params, shapes


def read_state(path, cfg, shapes):
    h = np.fromfile(path, dtype="<i4", count=256)
    B, T, V = int(h[2]), int(h[3]), cfg["V"]
    f = open(path, "rb")
    f.seek(256 * 4)
    inp = np.frombuffer(f.read(B * T * 4), dtype="<i4").reshape(B, T)
    tgt = np.frombuffer(f.read(B * T * 4), dtype="<i4").reshape(B, T)
    logits = np.frombuffer(f.read(B * T * V * 4), dtype="<f4").reshape(B, T, V)
    loss = float(np.frombuffer(f.read(4), dtype="<f4")[0])
    grads = {}
    for name in PARAM_NAMES:
        n = int(np.prod(shapes[name]))
        grads[name] = np.frombuffer(f.read(n * 4), dtype="<f4").reshape(shapes[name]).astype(np.float64)
    return (torch.from_numpy(inp.astype(np.int64)), torch.from_numpy(tgt.astype(np.int64)),
            torch.from_numpy(logits.astype(np.float64)), loss, grads)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def emulate(cfg, p32, inputs, targets, chunk):
    """Returns logits (B,T,V), loss, grads (dict) of the bf16 emulation."""
    B, T = inputs.shape
    V, L, NH, C = cfg["V"], cfg["L"], cfg["NH"], cfg["C"]
    hs = C // NH
    # parameters: bf16 once; wte twice as a leaf (LM head, embedding)
    p = {n: rb(t).clone().requires_grad_(True) for n, t in p32.items()}
    wte_emb = rb(p32["wte"]).clone().requires_grad_(True)
    x = S(wte_emb[inputs] + p["wpe"][:T])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = S(layer_norm(x, p["ln1w"][l], p["ln1b"][l]))
        qkv = S(h @ p["qkvw"][l].t() + p["qkvb"][l])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        pre = S((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)))
        att = S(pre.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        y = S((att @ v).transpose(1, 2).reshape(B, T, C))
        x = S(x + S(y @ p["attprojw"][l].t() + p["attprojb"][l]))
        h = S(layer_norm(x, p["ln2w"][l], p["ln2b"][l]))
        h = S(F.gelu(S(h @ p["fcw"][l].t() + p["fcb"][l]), approximate="tanh"))
        x = S(x + S(h @ p["fcprojw"][l].t() + p["fcprojb"][l]))
    lnf = S(layer_norm(x, p["lnfw"], p["lnfb"]))
    logits = S(LMHead.apply(lnf, p["wte"][:V], chunk))
    loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    loss.backward()
    grads = {}
    for n in PARAM_NAMES:
        g = p[n].grad if p[n].grad is not None else torch.zeros_like(p[n])
        if n == "wte":
            g = rb(g + rb(wte_emb.grad))  # g: the LM head's, rounded once above
        else:
            g = rb(g)
        grads[n] = g
    return logits.detach(), float(loss), grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="data/ref")
    ap.add_argument("--config", default="all")
    ap.add_argument("--vocab-chunk", type=int, default=8192)
    args = ap.parse_args()
    names = ["small", "odd", "tiny"] if args.config == "all" else [args.config]
    for name in names:
        cfg, params, shapes = read_model(os.path.join(args.dir, f"{name}_model.bin"))
        inp, tgt, ref_logits, ref_loss, ref_grads = read_state(
            os.path.join(args.dir, f"{name}_debug_state.bin"), cfg, shapes)
        logits, loss, grads = emulate(cfg, params, inp, tgt, args.vocab_chunk)
        print(f"== {name}: bf16-storage emulation vs the float64 reference "
              f"(B={inp.shape[0]} T={inp.shape[1]} V={cfg['V']} L={cfg['L']} C={cfg['C']})")
        print(f"   logits max abs err {float((logits - ref_logits).abs().max()):.3e}")
        print(f"   loss abs err {abs(loss - ref_loss):.3e}")
        worst = (0.0, "")
        for n in PARAM_NAMES:
            r = torch.from_numpy(ref_grads[n])
            g = grads[n]
            per = [(g, r, n)] if r.dim() < 2 or n in ("wte", "wpe", "lnfw", "lnfb") else \
                [(g[l], r[l], f"{n}[{l}]") for l in range(r.shape[0])]
            for gg, rr, label in per:
                mx = float(rr.abs().max())
                rel = float((gg - rr).abs().max()) / (mx if mx > 0 else 1.0)
                worst = max(worst, (rel, label))
                print(f"   grad {label:<12} rel. to max {mx:.2e}: {rel:.3e}")
        print(f"   worst gradient: {worst[1]} {worst[0]:.3e}")


if __name__ == "__main__":
    main()
