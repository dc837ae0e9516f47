"""
PyTorch reference of the GPT-2 model trained by train_gpt / checked by test_gpt.

It computes everything in float64 (so it is more exact than the fp32 C code it
checks) and writes, per config, three files in llm.c's formats:

  NAME_model.bin       model checkpoint, magic 20240326, version 3, fp32
  NAME_model_bf16.bin  the same parameters, version 5, bfloat16 (round to
                       nearest even of the fp32 values)
  NAME_debug_state.bin magic 20240327, version 2: inputs, targets, logits
                       (B,T,V real vocab), loss, the (unclipped) gradients of
                       all parameters, then our trailer (see below)

Model: pre-LayerNorm GPT-2. x = wte[idx] + wpe[t]; per block:
  x += attproj(causal_mha(qkv(ln1(x))));  x += fcproj(gelu_tanh(fc(ln2(x))))
then lnf, logits = lnf(x) @ wte[:V]^T (tied, no bias), loss = mean over all
B*T tokens of cross-entropy. LayerNorm eps 1e-5. qkv has 3C outputs ordered
q|k|v; head h uses channels h*hs:(h+1)*hs of each; scores scaled 1/sqrt(hs).
Linear weights are (out_features, in_features).

Parameter file order (all tensors stacked over layers L):
  wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
  attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C)
  fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
wte rows V..Vp-1 are zero (params, grads, and they stay zero under AdamW).

Initialization (seed --seed, torch.Generator, drawn in the file order above):
weights N(0, 0.02), attprojw and fcprojw N(0, 0.02/sqrt(2L)); every linear
bias N(0, 0.02); LayerNorm weights 1 + N(0, 0.1); LayerNorm biases N(0, 0.02).
The initial float64 parameters are then rounded to float32, so the fp32
checkpoint holds EXACTLY the parameters the float64 loss/grads were taken at.

Batch: one random sequence of B*T+1 token ids uniform in [0, V) drawn from the
same generator after the parameters; inputs = seq[:-1], targets = seq[1:]
(as llm.c's dataloader forms them), both viewed as (B, T).

Debug-state trailer (after the gradients; llm.c readers ignore it):
  int32 num_steps (10)
  float32 lr, beta1, beta2, eps, weight_decay, grad_clip
  float32 losses[num_steps]
losses[s] is the loss on the same batch before optimizer step s (losses[0] ==
the loss above). One step = forward, backward, clip, AdamW:
  * clip = torch.nn.utils.clip_grad_norm_(all params, grad_clip):
      norm = sqrt(sum of squares of ALL grads); coef = grad_clip/(norm+1e-6);
      if coef < 1: every grad *= coef
  * torch.optim.AdamW(lr, betas=(beta1, beta2), eps), constant lr, bias
    correction on; weight_decay on wte, wpe, qkvw, attprojw, fcw, fcprojw
    (the 2-D-per-layer matrices), 0 on LayerNorm params and linear biases:
      p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2
      p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
The optimizer uses the float32-rounded hyperparameters, i.e. exactly the
values stored in the trailer.

Usage:
  /usr/bin/python3 dev/reference.py --config small --out data/ref
  /usr/bin/python3 dev/reference.py --config all   --out data/ref  (small, odd, tiny)
  /usr/bin/python3 dev/reference.py --config d6 --model-only --out data/ref
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
import time

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC = 20240326
STATE_MAGIC = 20240327
NUM_STEPS = 10

# name: (maxT, V, L, NH, C, B, T, grad_clip)
# grad_clip is chosen per config so that clipping bites in some steps
# (see the printed norms); all other hyperparameters are shared.
CONFIGS = {
    "small": dict(maxT=64, V=50257, L=2, NH=4, C=64, B=12, T=32, grad_clip=0.67),
    "odd": dict(maxT=48, V=1001, L=3, NH=3, C=96, B=24, T=48, grad_clip=1.0),
    # tiny: units so small that with 16 ranks some ranks own only padding
    "tiny": dict(maxT=8, V=5, L=1, NH=1, C=2, B=16, T=8, grad_clip=0.1),
    "d6": dict(maxT=256, V=50257, L=6, NH=6, C=384, B=4, T=64, grad_clip=1.0),
}
HPARAMS = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)

# names in file order; which get weight decay
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
               "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
               "lnfw", "lnfb"]
DECAY_NAMES = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def padded_vocab(V):
    return (V + 127) // 128 * 128


def param_shapes(cfg):
    """Shapes of all parameter tensors, in file order."""
    Vp, maxT, L, C = padded_vocab(cfg["V"]), cfg["maxT"], cfg["L"], cfg["C"]
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


def f32(x):
    """A Python float rounded to the nearest float32 value."""
    return float(np.float32(x))


def init_params(cfg, gen):
    """GPT-2 init plus perturbations; float64 tensors holding fp32 values."""
    shapes = param_shapes(cfg)
    L, V = cfg["L"], cfg["V"]
    proj_std = 0.02 / math.sqrt(2 * L)
    params = {}
    for name in PARAM_NAMES:
        t = torch.empty(shapes[name], dtype=torch.float64)
        if name in ("attprojw", "fcprojw"):
            t.normal_(0.0, proj_std, generator=gen)
        elif name in ("ln1w", "ln2w", "lnfw"):
            t.normal_(0.0, 0.1, generator=gen)
            t += 1.0
        else:  # other weights, all biases, LayerNorm biases
            t.normal_(0.0, 0.02, generator=gen)
        if name == "wte":
            t[V:] = 0.0
        t = t.to(torch.float32).to(torch.float64)  # exact in the fp32 file
        params[name] = t.requires_grad_(True)
    return params


def forward(params, cfg, inputs, targets):
    """inputs, targets: (B,T) int64. Returns logits (B,T,V), mean loss."""
    B, T = inputs.shape
    V, L, NH, C = cfg["V"], cfg["L"], cfg["NH"], cfg["C"]
    hs = C // NH
    p = params
    x = p["wte"][inputs] + p["wpe"][:T]                         # (B,T,C)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].t() + p["qkvb"][l]               # (B,T,3C)
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)                # (B,NH,T,hs)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ p["attprojw"][l].t() + p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(h @ p["fcw"][l].t() + p["fcb"][l], approximate="tanh")
        x = x + (h @ p["fcprojw"][l].t() + p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"][:V].t()                               # (B,T,V)
    loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    return logits, loss


def model_header(cfg, version):
    h = np.zeros(256, dtype="<i4")
    h[0:8] = [MODEL_MAGIC, version, cfg["maxT"], cfg["V"], cfg["L"],
              cfg["NH"], cfg["C"], padded_vocab(cfg["V"])]
    return h


def num_parameters(cfg):
    return sum(int(np.prod(s)) for s in param_shapes(cfg).values())


def write_checked(path, chunks, expected_size):
    """Write byte chunks, then assert the file size equals expected_size."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)
    size = os.path.getsize(path)
    assert size == expected_size, f"{path}: {size} bytes, header implies {expected_size}"
    print(f"  wrote {path}: {size} bytes (= header-implied size)")


def write_model(path, cfg, params, bf16):
    P = num_parameters(cfg)
    chunks = [model_header(cfg, 5 if bf16 else 3).tobytes()]
    for name in PARAM_NAMES:
        t = params[name].detach().to(torch.float32).contiguous()
        if bf16:
            chunks.append(t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes())
        else:
            chunks.append(t.numpy().astype("<f4").tobytes())
    write_checked(path, chunks, 256 * 4 + P * (2 if bf16 else 4))


def write_debug_state(path, cfg, inputs, targets, logits, loss, grads, hp, losses):
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    P = num_parameters(cfg)
    h = np.zeros(256, dtype="<i4")
    h[0:4] = [STATE_MAGIC, 2, B, T]
    chunks = [h.tobytes(),
              inputs.numpy().astype("<i4").tobytes(),
              targets.numpy().astype("<i4").tobytes(),
              logits.to(torch.float32).numpy().astype("<f4").tobytes(),
              np.array([loss], dtype="<f4").tobytes()]
    for name in PARAM_NAMES:
        chunks.append(grads[name].to(torch.float32).numpy().astype("<f4").tobytes())
    chunks.append(np.array([len(losses)], dtype="<i4").tobytes())
    chunks.append(np.array([hp["lr"], hp["beta1"], hp["beta2"], hp["eps"],
                            hp["weight_decay"], hp["grad_clip"]], dtype="<f4").tobytes())
    chunks.append(np.array(losses, dtype="<f4").tobytes())
    expected = (256 * 4 + 2 * B * T * 4 + B * T * V * 4 + 4 + P * 4
                + 4 + 6 * 4 + len(losses) * 4)
    write_checked(path, chunks, expected)


def run_config(name, out, seed, model_only):
    cfg = CONFIGS[name]
    t0 = time.time()
    if "OMP_NUM_THREADS" not in os.environ:
        # threads only pay off for the big vocab matmuls; with the small ones
        # they mostly spin, badly so when the machine is shared
        big = cfg["B"] * cfg["T"] * cfg["V"] > 1_000_000
        torch.set_num_threads((os.cpu_count() or 1) if big else 1)
    gen = torch.Generator().manual_seed(seed)
    params = init_params(cfg, gen)
    B, T, V = cfg["B"], cfg["T"], cfg["V"]
    assert T <= cfg["maxT"] and cfg["C"] % cfg["NH"] == 0
    print(f"config {name}: maxT={cfg['maxT']} V={V} Vp={padded_vocab(V)} "
          f"L={cfg['L']} NH={cfg['NH']} C={cfg['C']} B={B} T={T} "
          f"num_parameters={num_parameters(cfg)} seed={seed}")
    os.makedirs(out, exist_ok=True)
    write_model(os.path.join(out, f"{name}_model.bin"), cfg, params, bf16=False)
    write_model(os.path.join(out, f"{name}_model_bf16.bin"), cfg, params, bf16=True)
    if model_only:
        print(f"  ({time.time() - t0:.1f} s)")
        return

    seq = torch.randint(0, V, (B * T + 1,), generator=gen, dtype=torch.int64)
    inputs, targets = seq[:-1].view(B, T), seq[1:].view(B, T)

    # hyperparameters as float32 values: exactly what the trailer stores
    hp = {k: f32(v) for k, v in HPARAMS.items()}
    hp["grad_clip"] = f32(cfg["grad_clip"])
    plist = [params[n] for n in PARAM_NAMES]
    opt = torch.optim.AdamW(
        [{"params": [params[n] for n in PARAM_NAMES if n in DECAY_NAMES],
          "weight_decay": hp["weight_decay"]},
         {"params": [params[n] for n in PARAM_NAMES if n not in DECAY_NAMES],
          "weight_decay": 0.0}],
        lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"])

    losses, norms = [], []
    for step in range(NUM_STEPS):
        opt.zero_grad(set_to_none=True)
        logits, loss = forward(params, cfg, inputs, targets)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits0 = logits.detach()
            loss0 = loss.item()
            grads0 = {n: params[n].grad.detach().clone() for n in PARAM_NAMES}
            assert torch.all(grads0["wte"][V:] == 0)
        norm = torch.nn.utils.clip_grad_norm_(plist, hp["grad_clip"]).item()
        norms.append(norm)
        opt.step()
        assert torch.all(params["wte"][V:] == 0), "wte pad rows must stay zero"

    print(f"  lr={hp['lr']:.9g} betas=({hp['beta1']:.9g},{hp['beta2']:.9g}) "
          f"eps={hp['eps']:.9g} wd={hp['weight_decay']:.9g} grad_clip={hp['grad_clip']:.9g}")
    for s in range(NUM_STEPS):
        clipped = "clipped" if norms[s] > hp["grad_clip"] else ""
        print(f"  step {s}: loss {losses[s]:.10f}  grad norm {norms[s]:.6f} {clipped}")
    nclip = sum(n > hp["grad_clip"] for n in norms)
    margin = min(abs(n - hp["grad_clip"]) for n in norms) / hp["grad_clip"]
    print(f"  clipping bit in {nclip} of {NUM_STEPS} steps; closest norm is "
          f"{100 * margin:.2f}% from grad_clip")
    assert nclip > 0, f"config {name}: grad_clip {hp['grad_clip']} never bites; lower it"

    write_debug_state(os.path.join(out, f"{name}_debug_state.bin"), cfg, inputs,
                      targets, logits0, loss0, grads0, hp, losses)
    print(f"  ({time.time() - t0:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="all", choices=list(CONFIGS) + ["all"])
    ap.add_argument("--out", default="data/ref")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--model-only", action="store_true",
                    help="write only the two model files (no debug state)")
    args = ap.parse_args()
    t0 = time.time()
    names = ["small", "odd", "tiny"] if args.config == "all" else [args.config]
    for name in names:
        run_config(name, args.out, args.seed, args.model_only)
    print(f"done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
