"""
dev/kernels_ref.py -- PyTorch float64 per-op reference for llmc/cpu/kernels.h.

Reads what `test_kernels --dump DIR` wrote (inputs and the C kernels' outputs
of every kernel, on B=2 T=7 C=12 NH=3 V=37 Vp=40), recomputes each op with
torch in float64 (backward by autograd; AdamW by torch.optim.AdamW itself,
in float64 and in float32) and compares: max|c - torch| / max|torch| <= 1e-5.
Last line "N passed, M failed"; exit 1 on failure.

usage (Debian's torch lives in /usr/bin/python3):
    ./test_kernels --dump /tmp/kd && /usr/bin/python3 dev/kernels_ref.py /tmp/kd
"""
import os as _os
import sys as _sys
from pyreq import require
if __name__ == "__main__":
    require('numpy', 'torch')

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL = 1e-5


def load(d):
    arrays, config = {}, {}
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            parts = line.split()
            if parts[0] == "config":
                it = iter(parts[1:])
                config = {k: int(v) for k, v in zip(it, it)}
                continue
            name, dtype, dims = parts[0], parts[1], [int(x) for x in parts[2:]]
            a = np.fromfile(os.path.join(d, name + ".bin"),
                            dtype=np.float32 if dtype == "f32" else np.int32)
            arrays[name] = torch.from_numpy(a.reshape(dims).copy())
    return arrays, config


passed = failed = 0


def check(name, got, ref, tol=TOL):
    global passed, failed
    got = got.double()
    ref = ref.double()
    err = (got - ref).abs().max().item()
    mag = ref.abs().max().item() or 1.0
    ok = err / mag <= tol and not torch.isnan(got).any().item()
    print(f"{'ok' if ok else 'FAIL':4} {name:28} max_abs_err {err:.3e}  max|ref| {mag:.3e}  rel {err / mag:.3e}")
    if ok:
        passed += 1
    else:
        failed += 1


def leaf(t):
    return t.double().clone().requires_grad_(True)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/kd"
    if d in ("-h", "--help"):
        print(__doc__)
        return 0
    if not os.path.isfile(os.path.join(d, "manifest.txt")):
        sys.exit("error: %s: no manifest.txt there: give the directory that `test_kernels --dump DIR` wrote" % d)
    a, cfg = load(d)
    B, T, C, NH, V, Vp = (cfg[k] for k in ("B", "T", "C", "NH", "V", "Vp"))
    N, hs = B * T, C // NH

    # encoder
    wte, wpe = leaf(a["enc_wte"]), leaf(a["enc_wpe"])
    idx = a["enc_inp"].long().view(B, T)
    out = wte[idx] + wpe[torch.arange(T)][None]
    out.backward(a["enc_dout"].double().view(B, T, C))
    check("encoder out", a["enc_out"], out.detach().view(N, C))
    check("encoder dwte", a["enc_dwte"], wte.grad)
    check("encoder dwpe", a["enc_dwpe"], wpe.grad)

    # layernorm
    x, w, b = leaf(a["ln_x"]), leaf(a["ln_w"]), leaf(a["ln_b"])
    out = F.layer_norm(x, (C,), w, b, eps=1e-5)
    out.backward(a["ln_dout"].double())
    check("layernorm out", a["ln_out"], out.detach())
    check("layernorm dinp", a["ln_dx"], x.grad)
    check("layernorm dweight", a["ln_dw"], w.grad)
    check("layernorm dbias", a["ln_db"], b.grad)

    # matmul
    x, w, b = leaf(a["mm_x"]), leaf(a["mm_w"]), leaf(a["mm_b"])
    out = F.linear(x, w, b)
    out.backward(a["mm_dout"].double())
    check("matmul out", a["mm_out"], out.detach())
    check("matmul dinp", a["mm_dx"], x.grad)
    check("matmul dweight", a["mm_dw"], w.grad)
    check("matmul dbias", a["mm_db"], b.grad)

    # attention
    qkv = leaf(a["att_qkv"])
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    pre = q @ k.transpose(-2, -1) / hs ** 0.5
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = torch.softmax(pre.masked_fill(~mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    y.backward(a["att_dout"].double())
    check("attention out", a["att_out"], y.detach())
    check("attention att", a["att_att"], att.detach())
    check("attention dqkv", a["att_dqkv"], qkv.grad)

    # gelu
    x = leaf(a["gelu_x"])
    out = F.gelu(x, approximate="tanh")
    out.backward(a["gelu_dout"].double())
    check("gelu out", a["gelu_out"], out.detach())
    check("gelu dinp", a["gelu_dx"], x.grad)

    # classifier: mean cross-entropy over the N rows, dloss = 1/N
    lg = leaf(a["cls_logits"])
    tg = a["cls_targets"].long()
    losses = F.cross_entropy(lg[:, :V], tg, reduction="none")
    losses.mean().backward()
    check("classifier losses", a["cls_losses"], losses.detach())
    check("classifier dlogits", a["cls_dlogits"], lg.grad)

    # AdamW, two steps, torch.optim.AdamW itself (float64 and float32)
    for dt, tol in ((torch.float64, TOL), (torch.float32, TOL)):
        p = torch.nn.Parameter(a["adam_p0"].to(dt).clone())
        opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        for g in ("adam_g1", "adam_g2"):
            p.grad = a[g].to(dt).clone()
            opt.step()
        st = opt.state[p]
        tag = "f64" if dt == torch.float64 else "f32"
        check(f"adamw params ({tag})", a["adam_p2"], p.detach(), tol)
        check(f"adamw m ({tag})", a["adam_m2"], st["exp_avg"], tol)
        check(f"adamw v ({tag})", a["adam_v2"], st["exp_avg_sq"], tol)
        if dt == torch.float32:
            diff = (a["adam_p2"] - p.detach()).abs().max().item()
            print(f"     adamw float32 params: max |C - torch| = {diff:.3e} (bitwise equal: {diff == 0})")

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
