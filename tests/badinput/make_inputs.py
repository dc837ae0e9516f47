#!/usr/bin/python3
"""
make_inputs.py: writes the bad (and a few good) input files used by
tests/suites/bad_input.sh into one directory.

  /usr/bin/python3 tests/badinput/make_inputs.py OUTDIR REPO_ROOT

Token shards (llm.c: int32 header[256] = {20240520, 1, ntok}, then ntok
uint16 ids) are written from scratch, with ids < 1001 so they suit the odd
reference model (V=1001). Checkpoints, the tokenizer and the debug state are
copies of data/ref/odd_model.bin, data/gpt2_tokenizer.bin and
data/ref/odd_debug_state.bin with one thing broken each. Only the standard
library is used (struct), so it runs anywhere python3 does.
"""
import os
import random
import struct
import sys

SHARD_MAGIC, CKPT_MAGIC, TOK_MAGIC, STATE_MAGIC = 20240520, 20240326, 20240328, 20240327


def header(values):
    h = list(values) + [0] * (256 - len(values))
    return struct.pack("<256i", *h)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def shard(tokens, magic=SHARD_MAGIC, version=1, ntok=None):
    n = len(tokens) if ntok is None else ntok
    return header([magic, version, n]) + struct.pack("<%dH" % len(tokens), *tokens)


def patch_int(data, index, value):
    """data with int32 number `index` of the header replaced by value."""
    b = bytearray(data)
    b[4 * index:4 * index + 4] = struct.pack("<i", value)
    return bytes(b)


def main():
    out, root = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)
    good = [rng.randrange(0, 1001) for _ in range(4096)]
    w = lambda name, data: write(os.path.join(out, name), data)

    # ---- token shards ----
    w("good_train.bin", shard(good))
    w("good_val.bin", shard(good[:1024]))
    w("shard_bad_magic.bin", shard(good, magic=20240326))
    w("shard_bad_version.bin", shard(good, version=2))
    w("shard_truncated.bin", shard(good[:3000], ntok=4096))            # header says more than the data
    w("shard_trailing.bin", shard(good) + b"\x01\x02\x03")             # 3 bytes after the last token
    w("shard_short_header.bin", header([SHARD_MAGIC, 1, 0])[:100])     # shorter than the header
    w("shard_empty.bin", b"")
    w("shard_negative_count.bin", header([SHARD_MAGIC, 1, -5]))
    oob = list(good)
    oob[7] = 5000                                                      # id >= V=1001
    w("shard_token_oob.bin", shard(oob))
    late = list(good)
    late[3000] = 1001                                                  # exactly V, late in the shard
    w("shard_token_eq_vocab.bin", shard(late))
    w("val_token_oob.bin", shard(oob[:1024]))
    w("shard_too_small.bin", shard(good[:10]))                         # needs B*T*ranks+1 = 17 or 33
    w("shard_20tok.bin", shard(good[:20]))                             # enough for 1 rank, not for 2
    w("shard_50tok.bin", shard(good[:50]))                             # a micro-batch (17 or 33) but not a step of -d 64 (65)
    prose = ("The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election\n"
             "produced \"no evidence\" that any irregularities took place. Caf\u00e9 \u2014 na\u00efve.\n\n")
    w("text.txt", (prose * 20).encode("utf-8"))                       # a raw text given as data (over 1024 bytes)
    w("text_short.txt", prose.encode("utf-8"))                         # one under the 1024-byte header
    os.makedirs(os.path.join(out, "two_shards"), exist_ok=True)
    w("two_shards/part_000.bin", shard(good))
    w("two_shards/part_001.bin", shard(good, magic=1234))              # the 2nd shard of a glob is bad
    os.makedirs(os.path.join(out, "shard_is_dir.bin"), exist_ok=True)  # a directory matching the glob

    # ---- model checkpoints (from the odd reference model, maxT=48 V=1001 L=3 NH=3 C=96 Vp=1024) ----
    ck = open(os.path.join(root, "data/ref/odd_model.bin"), "rb").read()
    ck16 = open(os.path.join(root, "data/ref/odd_model_bf16.bin"), "rb").read()
    w("ck_bad_magic.bin", patch_int(ck, 0, 20240520))
    w("ck_version4.bin", patch_int(ck, 1, 4))
    w("ck_truncated.bin", ck[:len(ck) - 1000])
    w("ck_bf16_truncated.bin", ck16[:len(ck16) // 2])
    w("ck_trailing.bin", ck + b"\0\0\0\0")
    w("ck_short.bin", ck[:100])
    w("ck_empty.bin", b"")
    w("ck_zero_layers.bin", patch_int(ck, 4, 0))
    w("ck_negative_channels.bin", patch_int(ck, 6, -96))
    w("ck_zero_vocab.bin", patch_int(ck, 3, 0))
    w("ck_negative_maxT.bin", patch_int(ck, 2, -48))
    w("ck_negative_heads.bin", patch_int(ck, 5, -3))
    w("ck_heads_indivisible.bin", patch_int(ck, 5, 5))                # C=96 not divisible by 5
    w("ck_padded_small.bin", patch_int(ck, 7, 512))                    # Vp < V
    huge = patch_int(patch_int(patch_int(ck, 4, 1000), 6, 100000), 5, 1)
    w("ck_huge_dims.bin", huge)                                        # L=1000 C=100000: file far too small
    w("ck_huge_maxT.bin", patch_int(patch_int(patch_int(ck, 2, 1000000), 6, 100000), 5, 1))  # wpe alone 4e11 bytes
    b = bytearray(ck)
    b[1024 + 4 * 10:1024 + 4 * 11] = struct.pack("<f", float("nan"))    # a NaN in wte
    w("ck_nan.bin", bytes(b))

    # ---- tokenizer (llm.c decode file) ----
    tok = open(os.path.join(root, "data/gpt2_tokenizer.bin"), "rb").read()
    w("tok_bad_magic.bin", patch_int(tok, 0, 20240326))
    w("tok_bad_version.bin", patch_int(tok, 1, 3))
    w("tok_truncated.bin", tok[:len(tok) // 2])
    w("tok_short.bin", tok[:100])
    w("tok_trailing.bin", tok + b"xyz")
    w("tok_eot_out_of_range.bin", patch_int(tok, 3, 60000))

    # ---- debug state for test_gpt (odd: B=12 T=48) ----
    st = open(os.path.join(root, "data/ref/odd_debug_state.bin"), "rb").read()
    w("ds_bad_magic.bin", patch_int(st, 0, 20240326))
    w("ds_bad_version.bin", patch_int(st, 1, 7))
    w("ds_truncated.bin", st[:len(st) // 2])
    w("ds_short.bin", st[:100])
    w("ds_zero_batch.bin", patch_int(st, 2, 0))
    w("ds_negative_T.bin", patch_int(st, 3, -48))
    w("ds_T_too_long.bin", patch_int(st, 3, 64))                       # T > the model's maxT=48
    nsteps = struct.unpack("<i", st[-68:-64])[0]                          # our trailer: 4 + 24 + 4*10 bytes
    assert nsteps == 10, nsteps
    llmc = st[:-68]                                                       # llm.c's layout: ends after the gradients
    w("ds_grads_cut10.bin", llmc[:-10])                                   # 10 bytes missing in the gradients
    w("ds_trailer_cut5.bin", st[:-5])                                     # 5 bytes missing in the trailer
    w("ds_trailing3.bin", st + b"xyz")                                    # 3 bytes after the trailer

    # ---- a plain file, to put an output dir under ----
    w("a_file", b"not a directory\n")

    # ---- output dirs where the checkpoint cannot be written (one per rank count) ----
    for np_ in (1, 2):
        # the temporary name is taken by a directory: open(2) of <ckpt>.tmp fails
        os.makedirs(os.path.join(out, "out_tmp_blocked_%d" % np_, "model_00000001.bin.tmp"), exist_ok=True)
        # the final name is a non-empty directory: rename(2) of <ckpt>.tmp fails
        os.makedirs(os.path.join(out, "out_target_dir_%d" % np_, "model_00000001.bin"), exist_ok=True)
        w("out_target_dir_%d/model_00000001.bin/keep" % np_, b"x")


if __name__ == "__main__":
    main()
