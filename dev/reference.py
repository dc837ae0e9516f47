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

Any checkpoint this project (or llm.c) writes, against the trainer, and in
and out of PyTorch:

  --eval CKPT [-j GLOB] [-b B] [-t T] [-m M]
      the val loss of the model in CKPT (version 3 fp32 or 5 bf16, any size,
      padded vocab), in float64, over exactly the tokens the trainer's -x 0
      evaluates with the same flags (defaults as the trainer's: -j
      'data/brown/brown_val_*.bin' -b 4 -t 128 -m 80): the shards matching
      GLOB (llm.c token shards, sorted), read as sequences of T tokens plus
      the target (sequence k of a shard is tokens [k*T, k*T+T]; shards in
      order), the first M of them (at most all the split holds); the loss
      is the mean cross-entropy over their M*T tokens (B only sets how many
      go through the model at once: the result does not depend on it). Prints
      "val loss X of the model CKPT (N tokens; ...)". --expect LOSS (the
      trainer's printed value) also prints the relative difference and exits
      1 if it exceeds --rtol (default: FP32_RTOL = 1e-5 for a version-3
      file, BF16_K / sqrt(tokens) for version 5: docs/resume.md says how
      both were measured). --trainer-dtype bf16: the value came from
      ./train_gpt_cpu_bf16 (a bf16 run's fp32 checkpoint): a version-3
      file's weights are rounded to bf16 as that program computes with
      them, and the bound is BF16_K / sqrt(tokens); fp32: 1e-5.
  --export CKPT OUT.pt
      torch.save of the state dict of GPT (the module below): "header" (the
      file's 256 int32 header words) and the tensors of PARAM_NAMES in their
      file shapes, float32 (version 3) or bfloat16 (version 5), bit for bit.
  --import IN.pt OUT.bin
      the inverse: a checkpoint from such a state dict (from --export, or a
      GPT module trained in PyTorch); version 3 for float32 tensors, 5 for
      bfloat16. --import of --export's output is the original file byte for
      byte.

Usage:
  /usr/bin/python3 dev/reference.py --config small --out data/ref
  /usr/bin/python3 dev/reference.py --config all   --out data/ref  (small, odd, tiny)
  /usr/bin/python3 dev/reference.py --config d6 --model-only --out data/ref
  /usr/bin/python3 dev/reference.py --eval out/run/model_00000100.bin -j 'data/brown/brown_val_*.bin' -b 4 -t 128
  /usr/bin/python3 dev/reference.py --export model.bin model.pt; ... --import model.pt model.bin
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


# ---------------------------------------------------------------------------
# Checkpoints of any size: read, evaluate, export to and import from PyTorch
# ---------------------------------------------------------------------------

SHARD_MAGIC = 20240520
# --expect's bounds (measured by dev/eval_bound.sh; docs/resume.md, "Checking
# your model against PyTorch"). A version-3 (fp32) file in ./train_gpt_cpu:
# 1e-5 relative (measured at most 1.3e-7, the resolution of the 6 printed
# decimals). A version-5 (bf16) file in ./train_gpt_cpu_bf16, which rounds
# every stored activation to bf16: the difference is a mean of per-token
# rounding errors, so it shrinks as 1/sqrt(tokens); measured relative
# difference x sqrt(tokens) at most 9.8e-4, rms 5.3e-4 over 18 checkpoint
# and val-set pairs (64 to 10240 tokens), and 1.8e-3 on the check-model
# suite's d2 after 20 steps over 1280 tokens (5.04e-5 relative); the bound
# is BF16_K / sqrt(tokens) with BF16_K = 4e-3 (2.2 x the largest seen):
# 1.1e-4 at 1280 tokens, 4.0e-5 at make train's 10240.
FP32_RTOL = 1e-5
BF16_K = 4e-3


def bf16_rtol(ntok):
    """--expect's relative bound for a bf16 (version 5) file over ntok tokens."""
    return BF16_K / math.sqrt(ntok)


class InputError(Exception):
    """Bad input: one line, exit 1."""


def read_header(path):
    """The 256 int32 header words of an llm.c checkpoint, checked against the
    file's size: (header numpy int32[256], cfg dict, version)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(1024)
    except OSError as e:
        raise InputError("checkpoint %s: cannot read (%s)" % (path, e.strerror))
    if len(raw) < 1024:
        raise InputError("checkpoint %s: %d bytes, less than the 1024-byte header" % (path, size))
    h = np.frombuffer(raw, dtype="<i4").copy()
    if h[0] != MODEL_MAGIC:
        raise InputError("checkpoint %s: bad magic %d (expected %d, an llm.c model file)" % (path, h[0], MODEL_MAGIC))
    if h[1] not in (3, 5):
        raise InputError("checkpoint %s: unsupported version %d (expected 3 = fp32 or 5 = bf16)" % (path, h[1]))
    cfg = header_config(h, path)
    expect = 1024 + num_parameters(cfg) * (4 if h[1] == 3 else 2)
    if size != expect:
        raise InputError("checkpoint %s: %d bytes, but its header (L=%d C=%d Vp=%d maxT=%d, version %d) implies %d" %
                         (path, size, cfg["L"], cfg["C"], cfg["Vp"], cfg["maxT"], h[1], expect))
    return h, cfg, int(h[1])


def header_config(h, what):
    """cfg (maxT, V, L, NH, C, Vp) from header words 2..7, checked as the
    trainer checks them (gpt2_config_check)."""
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    cfg = dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp)
    for k in ("maxT", "V", "L", "NH", "C"):
        if cfg[k] < 1:
            raise InputError("%s: header %s = %d, must be >= 1" % (what, k, cfg[k]))
    if C % NH != 0:
        raise InputError("%s: header C = %d is not a multiple of NH = %d" % (what, C, NH))
    if Vp < V:
        raise InputError("%s: header padded vocab %d is smaller than the vocab %d" % (what, Vp, V))
    return cfg


def file_shapes(cfg):
    """param_shapes with the header's own padded vocab (llm.c's files pad to
    128; any Vp >= V is read as the header says)."""
    s = param_shapes(cfg)
    s["wte"] = (cfg["Vp"], cfg["C"])
    return s


def num_parameters(cfg):
    shapes = file_shapes(cfg) if "Vp" in cfg else param_shapes(cfg)
    return sum(int(np.prod(s)) for s in shapes.values())


def read_checkpoint(path):
    """(header, cfg, version, {name: tensor}) with the file's bits: float32
    tensors for version 3, bfloat16 for version 5, in PARAM_NAMES order and
    file shapes."""
    h, cfg, version = read_header(path)
    dt = "<f4" if version == 3 else "<i2"
    flat = np.fromfile(path, dtype=dt, offset=1024)
    tensors, off = {}, 0
    for name, shape in file_shapes(cfg).items():
        n = int(np.prod(shape))
        a = flat[off:off + n].reshape(shape)
        t = torch.from_numpy(a.astype(np.float32) if version == 3 else a.astype(np.int16))
        tensors[name] = t if version == 3 else t.view(torch.bfloat16)
        off += n
    return h, cfg, version, tensors


class GPT(torch.nn.Module):
    """The reference model as a module: parameters named and shaped as in the
    checkpoint file (PARAM_NAMES, stacked over layers; wte has the padded
    rows), and the buffer "header" (the file's 256 int32 header words), so
    that state_dict() is what --export writes and --import reads.
    forward(idx (B,T) int64, targets (B,T) or None) -> (logits (B,T,V), loss
    or None), computed in the parameters' dtype by forward() above."""

    def __init__(self, header, tensors):
        super().__init__()
        self.register_buffer("header", torch.as_tensor(np.asarray(header, dtype=np.int32)))
        self.cfg = header_config(np.asarray(header), "header")
        for name in PARAM_NAMES:
            setattr(self, name, torch.nn.Parameter(tensors[name].clone()))

    @classmethod
    def from_file(cls, path):
        """The model of an llm.c checkpoint (.bin) or of a state dict written
        by --export or torch.save(GPT.state_dict()) (.pt)."""
        if path.endswith(".pt"):
            sd = torch.load(path, map_location="cpu", weights_only=True)
            return cls(sd["header"].numpy(), sd)
        h, _, _, tensors = read_checkpoint(path)
        return cls(h, tensors)

    def forward(self, idx, targets=None):
        p = {n: getattr(self, n) for n in PARAM_NAMES}
        if targets is None:
            logits, _ = forward(p, self.cfg, idx, torch.zeros_like(idx))
            return logits, None
        return forward(p, self.cfg, idx, targets)


def val_shards(pattern, B, T, V):
    """The trainer's val split for -j pattern: [(path, uint16 tokens)] in
    sorted order, each checked as llmc/dataloader.h checks it (magic, version,
    size, at least B*T+1 tokens, ids < V)."""
    import glob
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise InputError("-j %s: no file matches the token shard pattern" % pattern)
    out = []
    for p in paths:
        raw = open(p, "rb").read()
        if len(raw) < 1024:
            raise InputError("token shard %s has %d bytes, less than the 1024-byte header" % (p, len(raw)))
        h = np.frombuffer(raw[:1024], dtype="<i4")
        if h[0] != SHARD_MAGIC:
            raise InputError("token shard %s has magic %d, expected %d (llm.c token shard)" % (p, h[0], SHARD_MAGIC))
        if h[1] != 1:
            raise InputError("token shard %s has version %d, expected 1" % (p, h[1]))
        if h[2] < 0 or len(raw) != 1024 + 2 * int(h[2]):
            raise InputError("token shard %s: header says %d tokens (%d bytes) but the file has %d bytes" %
                             (p, h[2], 1024 + 2 * int(h[2]), len(raw)))
        tok = np.frombuffer(raw[1024:], dtype="<u2")
        if len(tok) < B * T + 1:
            raise InputError("token shard %s is too small for a micro-batch: it has %d tokens, needs at least "
                             "B*T+1 = %d*%d+1 = %d" % (p, len(tok), B, T, B * T + 1))
        if len(tok) and int(tok.max()) >= V:
            i = int(np.argmax(tok >= V))
            raise InputError("token shard %s: token index %d has id %d, must be < vocab_size %d" % (p, i, tok[i], V))
        out.append((p, tok))
    return out


def val_sequences(shards, T, nseq):
    """The first nseq sequences of the split (file order): inputs, targets
    (n, T) int64, n = min(nseq, the split's floor((ntok-1)/T) per shard)."""
    xs, ys, n = [], [], 0
    for _, tok in shards:
        S = (len(tok) - 1) // T
        for k in range(min(S, nseq - n)):
            w = tok[k * T:k * T + T + 1].astype(np.int64)
            xs.append(w[:-1]); ys.append(w[1:])
        n = len(xs)
        if n >= nseq:
            break
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


def evaluate(ckpt, pattern, B, T, M, round_bf16=False):
    """(mean val loss in float64, tokens read, sequences asked, read).
    round_bf16: a version-3 file's weights rounded to bfloat16 first
    (round to nearest even, as ./train_gpt_cpu_bf16 computes with them)."""
    h, cfg, version, tensors = read_checkpoint(ckpt)
    if round_bf16 and version == 3:
        tensors = {n: t.to(torch.bfloat16) for n, t in tensors.items()}
    if T > cfg["maxT"]:
        raise InputError("-t %d: sequence length must be in 1..%d (the model's max_seq_len)" % (T, cfg["maxT"]))
    shards = val_shards(pattern, B, T, cfg["V"])
    x, y = val_sequences(shards, T, M)
    params = {n: t.to(torch.float64) for n, t in tensors.items()}
    total = 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], B):
            xb, yb = x[i:i + B], y[i:i + B]
            _, loss = forward(params, cfg, xb, yb)
            total += loss.item() * xb.numel()
    ntok = x.numel()
    return total / ntok, ntok, M, x.shape[0], version


def export_pt(ckpt, out):
    h, cfg, version, tensors = read_checkpoint(ckpt)
    sd = GPT(h, tensors).state_dict()
    tmp = out + ".tmp"
    done = False
    try:
        torch.save(sd, tmp)
        os.replace(tmp, out)
        done = True
    except (OSError, RuntimeError) as e:  # torch 1.13 raises RuntimeError for a missing directory or a failed write
        why = getattr(e, "strerror", None) or (str(e).splitlines()[0] if str(e) else type(e).__name__)
        if isinstance(e, RuntimeError) and not why.startswith("Parent directory"):
            why = "the write failed half way, a full disk or a file-size limit? torch.save: " + why
        raise InputError("%s: cannot write it (%s)" % (out, why))
    finally:
        if not done and os.path.exists(tmp):  # no partial file, whatever ended the write
            os.unlink(tmp)
    print("wrote %s: the state dict of %s (version %d, %s; L=%d NH=%d C=%d maxT=%d V=%d Vp=%d): header + %d tensors" %
          (out, ckpt, version, "float32" if version == 3 else "bfloat16", cfg["L"], cfg["NH"], cfg["C"], cfg["maxT"],
           cfg["V"], cfg["Vp"], len(PARAM_NAMES)))


def import_pt(src, out):
    try:
        sd = torch.load(src, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 (torch raises many kinds)
        raise InputError("%s: not a state dict torch.load can read (%s)" % (src, str(e).splitlines()[0] if str(e) else type(e).__name__))
    if not isinstance(sd, dict):
        raise InputError("%s: holds a %s, not a state dict" % (src, type(sd).__name__))
    missing = [k for k in ["header"] + PARAM_NAMES if k not in sd]
    if missing:
        raise InputError("%s: the state dict has no %s (the names of reference.GPT: header, %s)" %
                         (src, ", ".join(missing), ", ".join(PARAM_NAMES)))
    extra = sorted(str(k) for k in sd if k not in ["header"] + PARAM_NAMES)
    if extra:
        raise InputError("%s: unknown tensor %s (the names of reference.GPT: header, %s)" % (src, extra[0], ", ".join(PARAM_NAMES)))
    notensor = [k for k in ["header"] + PARAM_NAMES if not isinstance(sd[k], torch.Tensor)]
    if notensor:
        raise InputError("%s: %s is a %s, not a tensor" % (src, notensor[0], type(sd[notensor[0]]).__name__))
    h = sd["header"]
    if h.dtype != torch.int32 or tuple(h.shape) != (256,):
        raise InputError("%s: header is %s %s, expected int32 (256,)" % (src, h.dtype, tuple(h.shape)))
    h = h.numpy().astype("<i4").copy()
    if h[0] != MODEL_MAGIC:
        raise InputError("%s: header magic %d, expected %d (an llm.c model header)" % (src, h[0], MODEL_MAGIC))
    cfg = header_config(h, src + ": header")
    dtypes = {sd[n].dtype for n in PARAM_NAMES}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.bfloat16):
        raise InputError("%s: tensors are %s: they must all be float32 (version 3) or all bfloat16 (version 5); "
                         "convert with .float() or .bfloat16()" % (src, ", ".join(sorted(str(d) for d in dtypes))))
    bf16 = next(iter(dtypes)) == torch.bfloat16
    h[1] = 5 if bf16 else 3
    chunks = [h.tobytes()]
    for name, shape in file_shapes(cfg).items():
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            raise InputError("%s: %s has shape %s, the header (L=%d NH=%d C=%d maxT=%d Vp=%d) implies %s" %
                             (src, name, tuple(t.shape), cfg["L"], cfg["NH"], cfg["C"], cfg["maxT"], cfg["Vp"], tuple(shape)))
        t = t.detach().contiguous()
        if not bool(torch.isfinite(t.float()).all()):
            raise InputError("%s: %s holds a non-finite value (the trainer refuses it)" % (src, name))
        chunks.append(t.view(torch.int16).numpy().astype("<i2").tobytes() if bf16 else t.numpy().astype("<f4").tobytes())
    tmp = out + ".tmp"
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise InputError("%s: cannot write (%s)" % (out, e.strerror))
    print("wrote %s: version %d (%s), L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %d parameters, %d bytes" %
          (out, h[1], "bf16" if bf16 else "fp32", cfg["L"], cfg["NH"], cfg["C"], cfg["maxT"], cfg["V"], cfg["Vp"],
           num_parameters(cfg), os.path.getsize(out)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="all", choices=list(CONFIGS) + ["all"])
    ap.add_argument("--out", default="data/ref")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--model-only", action="store_true",
                    help="write only the two model files (no debug state)")
    ap.add_argument("--eval", metavar="CKPT", help="the val loss of CKPT over the tokens the trainer's -x 0 reads")
    ap.add_argument("-j", default="data/brown/brown_val_*.bin", help="--eval: val token shards (glob), as the trainer's -j")
    ap.add_argument("-b", type=int, default=4, help="--eval: micro-batch B, as the trainer's -b")
    ap.add_argument("-t", type=int, default=128, help="--eval: sequence length T, as the trainer's -t")
    ap.add_argument("-m", type=int, default=80, help="--eval: val sequences of T tokens, as the trainer's -m")
    ap.add_argument("--expect", type=float, help="--eval: the trainer's val loss; exit 1 beyond --rtol")
    ap.add_argument("--trainer-dtype", choices=("fp32", "bf16"),
                    help="--expect: the arithmetic of the program that gave it (default: the file's, 3 fp32, 5 bf16); "
                         "bf16 rounds a version-3 file's weights to bf16 as ./train_gpt_cpu_bf16 does and takes the bf16 bound")
    ap.add_argument("--rtol", type=float, help="--expect's relative bound (default %g for fp32 files, %g/sqrt(tokens) for bf16)" %
                    (FP32_RTOL, BF16_K))
    ap.add_argument("--export", nargs=2, metavar=("CKPT", "OUT_PT"), help="CKPT as a PyTorch state dict (torch.save)")
    ap.add_argument("--import", dest="import_", nargs=2, metavar=("IN_PT", "OUT_BIN"), help="a state dict as a checkpoint")
    args = ap.parse_args()
    modes = [m for m in (args.eval, args.export, args.import_) if m]
    if len(modes) > 1:
        raise InputError("give one of --eval, --export, --import")
    if args.export:
        return export_pt(*args.export)
    if args.import_:
        return import_pt(*args.import_)
    if args.eval:
        for flag, v, lo in (("-b", args.b, 1), ("-t", args.t, 1), ("-m", args.m, 1)):
            if v < lo:
                raise InputError("%s %d: must be >= %d" % (flag, v, lo))
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(os.cpu_count() or 1)
        t0 = time.time()
        loss, ntok, asked, nseq, version = evaluate(args.eval, args.j, args.b, args.t, args.m, args.trainer_dtype == "bf16")
        capped = "" if nseq == asked else ", all the split holds (fewer than -m %d)" % args.m
        print("val loss %.6f of the model %s (%d tokens: the first %d sequences of T=%d of %s%s; float64, %.1f s)" %
              (loss, args.eval, ntok, nseq, args.t, args.j, capped, time.time() - t0))
        if args.expect is not None:
            arith = args.trainer_dtype or ("fp32" if version == 3 else "bf16")
            rtol = args.rtol if args.rtol is not None else (FP32_RTOL if arith == "fp32" else bf16_rtol(ntok))
            if args.rtol is not None:
                how = "--rtol"
            elif arith == "fp32":
                how = "version 3 file" if version == 3 else "version 5 file in the fp32 program"
            elif version == 5:
                how = "version 5 file: %g/sqrt(%d tokens)" % (BF16_K, ntok)
            else:
                how = "version 3 file in the bf16 program, its weights rounded to bf16: %g/sqrt(%d tokens)" % (BF16_K, ntok)
            rel = abs(args.expect - loss) / abs(loss)
            verdict = "within" if rel <= rtol else "BEYOND"
            print("trainer %.6f vs reference %.6f: relative difference %.3e, %s the bound %.3g (%s)" %
                  (args.expect, loss, rel, verdict, rtol, how))
            return 0 if rel <= rtol else 1
        return 0
    t0 = time.time()
    names = ["small", "odd", "tiny"] if args.config == "all" else [args.config]
    for name in names:
        run_config(name, args.out, args.seed, args.model_only)
    print(f"done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # os._exit, not sys.exit: a torch.save that failed half way keeps its zip writer alive in the
        # exception's frames, and that writer's destructor throws again at interpreter exit (terminate)
        os._exit(1)
