#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.
Deterministic (fixed RNG seed); run by tests/fuzz/run.sh when a corpus is
missing. The tiny model (maxT 4, V 8, Vp 8, L 1, NH 1, C 4) is the one the
checkpoint and state targets build (fuzz_common.h)."""
import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), '../../dev'))
from pyreq import require
if __name__ == "__main__":
    require('numpy')

import os, sys, struct
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(1234)

def out(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def nparams(maxT, V, Vp, L, NH, C):
    return Vp * C + maxT * C + 2 * C + L * (12 * C * C + 13 * C)

TINY = (4, 8, 8, 1, 1, 4)
P = nparams(*TINY)
assert P == 300

def ckpt(cfg, version=3, magic=20240326):
    maxT, V, Vp, L, NH, C = cfg
    h = np.zeros(256, "<i4"); h[:8] = [magic, version, maxT, V, L, NH, C, Vp]
    w = (0.02 * rng.standard_normal(nparams(*cfg))).astype("<f4")
    body = w.tobytes() if version == 3 else (w.view("<u4") >> 16).astype("<u2").tobytes()
    return h.tobytes() + body

out("checkpoint", "tiny_v3.bin", ckpt(TINY))
out("checkpoint", "tiny_v5_bf16.bin", ckpt(TINY, 5))
out("checkpoint", "other_config_L2.bin", ckpt((4, 8, 8, 2, 2, 4)))
out("checkpoint", "bad_magic.bin", ckpt(TINY, magic=20240520))

def state(cfg, master=False, step=5, shard=0, pos=640, nshards=1, ntok=1731):
    maxT, V, Vp, L, NH, C = cfg
    n = nparams(*cfg)
    h = np.zeros(128, "<i8")
    h[:18] = [20240612, 1, step, n, maxT, V, Vp, L, NH, C, shard, pos, nshards, ntok, 1337, 3, 2, int(master)]
    m = (1e-3 * rng.standard_normal(n)).astype("<f4")
    v = (1e-6 * rng.random(n)).astype("<f4")
    body = m.tobytes() + v.tobytes()
    if master:
        body += (0.02 * rng.standard_normal(n)).astype("<f4").tobytes()
    return h.tobytes() + body

out("state", "tiny.bin", state(TINY))
out("state", "tiny_master.bin", state(TINY, master=True, step=7, shard=2, pos=0, nshards=3))
out("state", "other_config_L2.bin", state((4, 8, 8, 2, 2, 4)))

def tok(tokens, version=2, eot=None):
    h = np.zeros(256, "<i4"); h[:3] = [20240328, version, len(tokens)]
    if version == 2:
        h[3] = len(tokens) - 1 if eot is None else eot
    return h.tobytes() + b"".join(bytes([len(t)]) + t for t in tokens)

words = [b"a", b"the", b" cat", b"\n", b"\xe2\x82", b"\xac", b"\x00x", bytes(range(200, 255))]
out("tokenizer", "v2_8.bin", tok(words))
out("tokenizer", "v1_8.bin", tok(words, version=1))
out("tokenizer", "v2_1.bin", tok([b"z"], eot=0))

def shard(ntok, vmax=50257):
    h = np.zeros(256, "<i4"); h[:3] = [20240520, 1, ntok]
    return h.tobytes() + rng.integers(0, vmax, ntok).astype("<u2").tobytes()

def dl(params, files):
    first = len(files[0])
    return bytes(params[:8]) + struct.pack("<H", first) + b"".join(files)

out("dataloader", "one_shard.bin", dl([1, 3, 0, 0, 0, 8, 0, 0], [shard(64)]))
out("dataloader", "two_shards_ranks.bin", dl([1, 1, 1, 1, 0, 12, 0, 0], [shard(40), shard(33)]))
out("dataloader", "seek_resume.bin", dl([0, 7, 2, 2, 0, 15, 0x81, 5], [shard(50), shard(70)]))
out("dataloader", "small_vocab.bin", dl([3, 7, 0, 0, 2 + 4 * 60, 9, 0x80, 1], [shard(200, 200)]))
print("seed corpora written to", os.path.join(here, "corpus"))
