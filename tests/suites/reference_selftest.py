"""
Self-test of the files written by dev/reference.py, with a reader and a
float64 GPT-2 forward of its own (numpy only, no torch, nothing shared with
reference.py), so a mistake in the reference's model or writer shows up as a
disagreement here.

Checks per config: model headers and sizes (fp32 v3, bf16 v5), wte pad rows
zero in params and grads, bf16 file == fp32 values rounded to nearest even,
debug-state header/size/trailer, targets == inputs shifted by one, the stored
loss and logits == a fresh float64 forward of the fp32 checkpoint, and central
finite differences on 3 random scalar parameters (plus one wte entry of a
token that is both input and target: tied weights) == the stored gradients.

Usage:
  /usr/bin/python3 tests/suites/reference_selftest.py [--dir data/ref] [--configs small,odd,tiny]
                                             [--generate] [--seed 0]
--generate first runs dev/reference.py --config all --out DIR.
The last line printed is "N passed, M failed"; the exit status is 1 on failure.
"""

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), '../../dev'))
from pyreq import require
if __name__ == "__main__":
    require('numpy')

import argparse
import os
import subprocess
import sys
import traceback
import zlib

import numpy as np

# expected header values: name -> (maxT, V, L, NH, C, B, T)
EXPECTED = {
    "small": (64, 50257, 2, 4, 64, 12, 32),
    "odd": (48, 1001, 3, 3, 96, 24, 48),
    "tiny": (8, 5, 1, 1, 2, 16, 8),
}
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
FD_TOL = 1e-4      # relative, finite difference vs stored gradient
LOSS_TOL = 1e-6    # absolute, stored loss vs fresh float64 forward

passed = 0
failed = 0


def check(name, fn, *args):
    """Run one check; an AssertionError (or any exception) is a failure."""
    global passed, failed
    try:
        fn(*args)
        passed += 1
        print(f"PASS {name}")
    except Exception as e:  # noqa: BLE001 - any error fails this check only
        failed += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        if not isinstance(e, AssertionError):
            traceback.print_exc()


# ---------------------------------------------------------------- reading

def shapes_of(maxT, V, Vp, L, C):
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C),
            (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C),
            (L, C, 4 * C), (L, C), (C,), (C,)]


def split_tensors(flat, shapes):
    out, off = {}, 0
    for name, shp in zip(NAMES, shapes):
        n = int(np.prod(shp))
        out[name] = flat[off:off + n].reshape(shp)
        off += n
    assert off == flat.size, f"{flat.size - off} trailing elements"
    return out


class Model:
    """Raw content of one checkpoint file."""

    def __init__(self, path):
        raw = open(path, "rb").read()
        assert len(raw) >= 1024, f"{path}: shorter than the header"
        self.header = np.frombuffer(raw[:1024], dtype="<i4")
        magic, version, maxT, V, L, NH, C, Vp = (int(x) for x in self.header[:8])
        assert magic == 20240326, f"bad magic {magic}"
        assert version in (3, 5), f"bad version {version}"
        self.version, self.maxT, self.V, self.L, self.NH, self.C, self.Vp = \
            version, maxT, V, L, NH, C, Vp
        self.shapes = shapes_of(maxT, V, Vp, L, C)
        self.P = sum(int(np.prod(s)) for s in self.shapes)
        esize = 4 if version == 3 else 2
        assert len(raw) == 1024 + self.P * esize, \
            f"{path}: {len(raw)} bytes, header implies {1024 + self.P * esize}"
        self.flat = np.frombuffer(raw[1024:], dtype="<f4" if version == 3 else "<u2")
        self.t = split_tensors(self.flat, self.shapes)


class DebugState:
    def __init__(self, path, model):
        raw = open(path, "rb").read()
        h = np.frombuffer(raw[:1024], dtype="<i4")
        assert int(h[0]) == 20240327, f"bad magic {h[0]}"
        assert int(h[1]) == 2, f"bad version {h[1]}"
        self.B, self.T = B, T = int(h[2]), int(h[3])
        V, P = model.V, model.P
        off = 1024
        def take(n, dt):
            nonlocal off
            a = np.frombuffer(raw, dtype=dt, count=n, offset=off)
            off += n * 4
            return a
        self.inputs = take(B * T, "<i4").reshape(B, T)
        self.targets = take(B * T, "<i4").reshape(B, T)
        self.logits = take(B * T * V, "<f4").reshape(B, T, V)
        self.loss = float(take(1, "<f4")[0])
        self.grads = split_tensors(take(P, "<f4"), model.shapes)
        self.num_steps = int(take(1, "<i4")[0])
        (self.lr, self.beta1, self.beta2, self.eps, self.weight_decay,
         self.grad_clip) = (float(x) for x in take(6, "<f4"))
        self.losses = take(self.num_steps, "<f4").astype(np.float64)
        self.size, self.implied = len(raw), off


# ---------------------------------------------------------------- model

def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(p, m, inputs, targets):
    """float64 GPT-2 forward; p: dict of float64 arrays. Returns logits, loss."""
    B, T = inputs.shape
    C, NH, V = m.C, m.NH, m.V
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][:T]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    for l in range(m.L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q = qkv[..., 0:C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        k = qkv[..., C:2 * C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        v = qkv[..., 2 * C:].reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        s = np.where(future, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"][:V].T
    mx = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - mx).sum(-1)) + mx[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    return logits, float((lse - picked).mean())


def bf16_rne(f32):
    """float32 array -> uint16 bf16 bits, round to nearest even (finite input)."""
    u = f32.view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---------------------------------------------------------------- checks

def test_config(d, cfg, seed):
    maxT, V, L, NH, C, B, T = EXPECTED[cfg]
    Vp = (V + 127) // 128 * 128
    paths = {k: os.path.join(d, f"{cfg}_{k}.bin")
             for k in ("model", "model_bf16", "debug_state")}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        check(f"{cfg}: files exist", lambda: (_ for _ in ()).throw(AssertionError(
            f"missing {missing}; run /usr/bin/python3 dev/reference.py --config all --out {d}")))
        return
    st = {}

    def load():
        st["m"] = Model(paths["model"])
        st["mb"] = Model(paths["model_bf16"])
        st["ds"] = DebugState(paths["debug_state"], st["m"])
    check(f"{cfg}: read files, magic, versions, sizes", load)
    if "ds" not in st:
        return
    m, mb, ds = st["m"], st["mb"], st["ds"]

    def headers():
        for mm, ver in ((m, 3), (mb, 5)):
            assert mm.version == ver, f"version {mm.version} != {ver}"
            got = (mm.maxT, mm.V, mm.L, mm.NH, mm.C, mm.Vp)
            assert got == (maxT, V, L, NH, C, Vp), f"header {got}"
            assert not mm.header[8:].any(), "header[8:] not zero"
        assert (ds.B, ds.T) == (B, T), f"debug B,T {(ds.B, ds.T)}"
        assert ds.size == ds.implied, f"debug state {ds.size} bytes, implied {ds.implied}"
        expect = 1024 + 8 * B * T + 4 * B * T * V + 4 + 4 * m.P + 4 + 24 + 4 * ds.num_steps
        assert ds.size == expect, f"debug state {ds.size} != {expect}"
        print(f"  {cfg}: num_parameters={m.P} sizes {os.path.getsize(paths['model'])}, "
              f"{os.path.getsize(paths['model_bf16'])}, {ds.size} bytes")
    check(f"{cfg}: header fields and header-implied sizes", headers)

    def pads():
        assert not m.t["wte"][V:].any(), "wte pad rows nonzero in fp32 params"
        assert not mb.t["wte"][V:].any(), "wte pad rows nonzero in bf16 params"
        assert not ds.grads["wte"][V:].any(), "wte pad rows nonzero in grads"
        assert not ds.grads["wpe"][T:].any(), "wpe grads nonzero beyond T"
        for n in NAMES:  # every tensor must be distinguishable from a default
            assert np.isfinite(m.t[n]).all() and np.isfinite(ds.grads[n]).all(), n
            assert ds.grads[n].any(), f"grad of {n} all zero"
        for n in ("ln1w", "ln2w", "lnfw"):
            # a handful of draws (tiny config, C=2) may all be small: then only require nonzero
            assert np.abs(m.t[n] - 1).max() > (0.05 if m.t[n].size >= 16 else 0), f"{n} not perturbed from 1"
        for n in ("ln1b", "ln2b", "lnfb", "qkvb", "attprojb", "fcb", "fcprojb"):
            assert np.abs(m.t[n]).max() > (0.01 if m.t[n].size >= 16 else 0), f"{n} not perturbed from 0"
    check(f"{cfg}: wte pad rows zero, tensors finite and perturbed", pads)

    def bf16():
        want = bf16_rne(np.ascontiguousarray(m.flat))
        bad = np.count_nonzero(want != mb.flat)
        assert bad == 0, f"{bad} bf16 values differ from RNE(fp32)"
    check(f"{cfg}: bf16 file == fp32 rounded to nearest even", bf16)

    def batch():
        assert ds.inputs.min() >= 0 and ds.inputs.max() < V, "input id out of range"
        assert ds.targets.min() >= 0 and ds.targets.max() < V, "target id out of range"
        assert (ds.inputs.reshape(-1)[1:] == ds.targets.reshape(-1)[:-1]).all(), \
            "targets are not inputs shifted by one"
    check(f"{cfg}: inputs/targets in [0,V), targets = inputs shifted", batch)

    def trailer():
        f = lambda x: float(np.float32(x))
        assert ds.num_steps == 10, f"num_steps {ds.num_steps}"
        assert (ds.lr, ds.beta1, ds.beta2, ds.eps, ds.weight_decay) == \
            (f(1e-3), f(0.9), f(0.95), f(1e-8), f(0.1)), "hyperparameters"
        assert 0 < ds.grad_clip <= 1.0, f"grad_clip {ds.grad_clip}"
        assert ds.losses[0] == np.float32(ds.loss), "losses[0] != loss"
        assert np.isfinite(ds.losses).all() and (np.diff(ds.losses) < 0).all(), \
            f"losses not decreasing: {ds.losses}"
        print(f"  {cfg}: grad_clip={ds.grad_clip} losses {np.round(ds.losses, 5).tolist()}")
    check(f"{cfg}: trailer (num_steps, hyperparameters, losses)", trailer)

    p64 = {n: m.t[n].astype(np.float64) for n in NAMES}
    inputs, targets = ds.inputs.astype(np.int64), ds.targets.astype(np.int64)

    def loss():
        logits, l = forward(p64, m, inputs, targets)
        dl = abs(l - ds.loss)
        dlog = np.abs(logits - ds.logits).max()
        print(f"  {cfg}: loss stored {ds.loss:.9f} fresh {l:.9f} |diff| {dl:.2e}; "
              f"max |logit diff| {dlog:.2e}")
        assert dl <= LOSS_TOL, f"loss differs by {dl}"
        assert dlog <= 1e-5, f"logits differ by {dlog}"
    check(f"{cfg}: stored loss/logits == float64 forward of fp32 checkpoint", loss)

    rng = np.random.default_rng([seed, zlib.crc32(cfg.encode())])
    picks = []
    for name in rng.choice(NAMES, size=3, replace=False):
        g = ds.grads[name]
        # a scalar whose gradient is not tiny, so a relative check is meaningful
        cand = np.flatnonzero(np.abs(g) >= 0.1 * np.abs(g).max())
        picks.append((name, np.unravel_index(int(rng.choice(cand)), g.shape)))
    # plus one wte entry of a token that is both an input and a target, so the
    # embedding and the tied LM head both contribute to its gradient
    both = np.intersect1d(ds.inputs, ds.targets)
    tok = int(both[np.argmax(np.abs(ds.grads["wte"][both]).max(1))])
    picks.append(("wte", (tok, int(np.argmax(np.abs(ds.grads["wte"][tok]))))))
    for name, idx in picks:
        g = ds.grads[name].astype(np.float64)

        def fd(name=name, idx=idx, g=g):
            h = 1e-5 * max(1.0, abs(p64[name][idx]))
            q = dict(p64)
            q[name] = p64[name].copy()
            q[name][idx] += h
            lp = forward(q, m, inputs, targets)[1]
            q[name][idx] -= 2 * h
            lm = forward(q, m, inputs, targets)[1]
            num = (lp - lm) / (2 * h)
            rel = abs(num - g[idx]) / max(abs(num), abs(g[idx]))
            print(f"  {cfg}: d loss/d {name}{list(idx)}: stored {g[idx]:.9e} "
                  f"finite diff {num:.9e} rel err {rel:.1e}")
            assert rel <= FD_TOL, f"relative error {rel:.2e} > {FD_TOL}"
        check(f"{cfg}: finite difference {name}{list(idx)}", fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="data/ref")
    ap.add_argument("--configs", default="small,odd,tiny")
    ap.add_argument("--generate", action="store_true",
                    help="run dev/reference.py --config all --out DIR first")
    ap.add_argument("--seed", type=int, default=0, help="picks the FD scalars")
    args = ap.parse_args()
    if args.generate:
        ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "dev", "reference.py")
        subprocess.run([sys.executable, ref, "--config", "all", "--out", args.dir],
                       check=True)
    for cfg in args.configs.split(","):
        test_config(args.dir, cfg, args.seed)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
