"""compare_runs.py: compare training runs of the trainer (stage against stage,
fp32 against bf16, this trainer against a reference run), step by step.

    /usr/bin/python3 dev/compare_runs.py RUN_A RUN_B [RUN_C ...] [-o overlay.png] [--tol REL] [--expect-equal]
    make compare RUNS="RUN_A RUN_B" [PLOT=overlay.png]

A RUN is the -o directory of a run (main.log, model_*.bin, state_*.bin). Every
run after the first is compared with the first:

  - per metric of main.log (train_loss, val_loss, norm, lr), on the steps
    both runs logged: how many, the largest absolute and relative
    difference (and at which step), the first step where the printed values
    differ, and whether every value is bitwise equal (the same printed
    string: main.log prints 6 decimals; the checkpoints below decide bits);
  - per checkpoint step both runs saved: model_S.bin byte-identical (cmp)
    or, when not, the largest absolute difference per tensor (llm.c's
    format, fp32 version 3 or bf16 version 5, tensor-major); state_S.bin
    byte-identical, or the largest differences of Adam m and v; a
    state_S.bin only one of them has is a difference (a stop that lost it).

Differences beyond the common steps are printed too: a step one run logged
and the other did not (a run cut short), a NaN or infinite value (a
diverged run), val losses over different val sets (main.log's val_tokens).
A checkpoint step only one run saved (the extra checkpoint of a run stopped
by a signal and resumed, another -n) is named, not compared and not a
difference. Half a pair is a difference at any step, compared or not: a
model without its state or a state without its model (an incomplete
checkpoint, in a run that saves states; a resume reads neither).

--tol REL: exit 1 if a metric's largest relative difference exceeds REL,
or if any of the differences above is found. --expect-equal: exit 1 unless
both runs logged the same steps, saved at least one checkpoint step in
common (when either saved any), and every value and every checkpoint both
saved is bitwise equal (a NaN never passes). -o FILE: one
picture with every run's train and val loss overlaid, each run labelled
once in the legend with its last val loss. Bad input (a run without
main.log, an empty main.log, a broken checkpoint) is one error line, exit 1.
"""

import argparse
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyreq import require  # noqa: E402

MODEL_MAGIC, STATE_MAGIC = 20240326, 20240612
METRICS = ("train_loss", "val_loss", "norm", "lr")


class InputError(Exception):
    pass


def read_log(run):
    """{metric: {step: printed value}} from RUN/main.log."""
    p = os.path.join(run, "main.log")
    if not os.path.isfile(p):
        raise InputError("%s: no main.log (give the -o directory of a run)" % run)
    out = {m: {} for m in METRICS + ("val_tokens",)}
    lines = 0
    for n, line in enumerate(open(p), 1):
        if not line.strip():
            continue
        lines += 1
        f = line.split()
        if len(f) < 4 or f[0] != "step":
            raise InputError("%s: line %d is not a main.log line: %r" % (p, n, line.strip()[:60]))
        try:
            step = int(f[1])
        except ValueError:
            raise InputError("%s: line %d: step %r is not an integer" % (p, n, f[1]))
        for k in range(2, len(f) - 1, 2):
            if f[k] in out:
                out[f[k]][step] = f[k + 1]  # a resumed run appends: the last value of a step wins
    if lines == 0:
        raise InputError("%s is empty: the run logged no step (did it start?)" % p)
    return out


def ranges(steps):
    """'1..3, 7' for [1, 2, 3, 7]."""
    out, i = [], 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        out.append("%d" % steps[i] if i == j else "%d..%d" % (steps[i], steps[j]))
        i = j + 1
    return ", ".join(out)


def nonfinite(values):
    """The steps whose printed value is not a finite number (nan, inf)."""
    return sorted(s for s, v in values.items() if not math.isfinite(float(v)))


def compare_metric(a, b):
    steps = sorted(set(a) & set(b))
    if not steps:
        return None
    worst_abs = worst_rel = 0.0
    at_abs = at_rel = steps[0]
    first = None
    nonfin = 0
    for s in steps:
        x, y = float(a[s]), float(b[s])
        if not (math.isfinite(x) and math.isfinite(y)):
            nonfin += 1
            if first is None and a[s] != b[s]:
                first = s
            continue  # reported as non-finite (nonfinite), never as a small difference
        d = abs(x - y)
        r = d / abs(x) if x != 0 else (0.0 if d == 0 else float("inf"))
        if d > worst_abs:
            worst_abs, at_abs = d, s
        if r > worst_rel:
            worst_rel, at_rel = r, s
        if first is None and a[s] != b[s]:
            first = s
    return dict(n=len(steps), steps=(steps[0], steps[-1]), abs=worst_abs, abs_at=at_abs, rel=worst_rel, rel_at=at_rel,
                first=first, equal=first is None, nonfinite=nonfin)


def model_tensors(path):
    """[(name, numpy float64 array)] of an llm.c checkpoint."""
    import numpy as np
    raw = open(path, "rb").read()
    if len(raw) < 1024:
        raise InputError("%s: %d bytes, shorter than the 1024-byte header" % (path, len(raw)))
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if h[0] != MODEL_MAGIC or h[1] not in (3, 5):
        raise InputError("%s: not an llm.c model file (magic %d, version %d)" % (path, h[0], h[1]))
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C),
             ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
             ("fcb", L * 4 * C), ("fcprojw", L * 4 * C * C), ("fcprojb", L * C), ("lnfw", C), ("lnfb", C)]
    total = sum(n for _, n in sizes)
    eb = 4 if h[1] == 3 else 2
    if len(raw) != 1024 + eb * total:
        raise InputError("%s: %d bytes, its header (L=%d C=%d Vp=%d maxT=%d, version %d) implies %d" %
                         (path, len(raw), L, C, Vp, maxT, h[1], 1024 + eb * total))
    if eb == 4:
        w = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    else:
        w = (np.frombuffer(raw[1024:], dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    out, off = [], 0
    for name, n in sizes:
        out.append((name, w[off:off + n]))
        off += n
    return out


def state_arrays(path):
    import numpy as np
    raw = open(path, "rb").read()
    if len(raw) < 1024:
        raise InputError("%s: shorter than the 1024-byte header" % path)
    h = np.frombuffer(raw[:1024], dtype="<i8")
    if h[0] != STATE_MAGIC:
        raise InputError("%s: not a training state (magic %d)" % (path, h[0]))
    psi = int(h[3])
    if len(raw) != 1024 + 4 * psi * (2 + int(h[17])):
        raise InputError("%s: %d bytes, its header implies %d" % (path, len(raw), 1024 + 4 * psi * (2 + int(h[17]))))
    x = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    return [("adam m", x[:psi]), ("adam v", x[psi:2 * psi])]


def checkpoints(run):
    """The checkpoint steps of a run: every S with a model_S.bin or a state_S.bin."""
    return {int(m.group(2)) for f in os.listdir(run) for m in [re.fullmatch(r"(model|state)_(\d{8})\.bin", f)] if m}


def has_states(run):
    """Whether the run saved training states (state_S.bin) at all."""
    return any(re.fullmatch(r"state_\d{8}\.bin", f) for f in os.listdir(run))


def same_bytes(p, q):
    return os.path.getsize(p) == os.path.getsize(q) and open(p, "rb").read() == open(q, "rb").read()


def diff_arrays(xa, xb, what):
    lines = []
    for (n1, a), (n2, b) in zip(xa, xb):
        if a.shape != b.shape:
            raise InputError("%s: tensor %s has %d elements in one run and %d in the other" % (what, n1, a.size, b.size))
        d = float(abs(a - b).max()) if a.size else 0.0
        ref = float(abs(a).max()) if a.size else 0.0
        lines.append("      %-9s max |diff| %.3e (max |a| %.3e)" % (n1, d, ref))
    return lines


def overlay(runs, logs, out):
    require("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5))
    for i, (run, log) in enumerate(zip(runs, logs)):
        color = "C%d" % (i % 10)
        name = os.path.basename(os.path.normpath(run))
        tr = sorted(log["train_loss"].items())
        va = sorted(log["val_loss"].items())
        last = (" (last val %.4f)" % float(va[-1][1])) if va else ""
        if tr:
            ax.plot([s for s, _ in tr], [float(v) for _, v in tr], color=color, lw=1.0, alpha=0.8, label="%s: train%s" % (name, last))
        if va:
            ax.plot([s for s, _ in va], [float(v) for _, v in va], color=color, lw=1.5, ls="--", marker="o", ms=4, label="%s: val" % name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title("train (solid) and val (dashed) loss of %d runs" % len(runs))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print("wrote %s" % out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN")
    ap.add_argument("-o", dest="plot", help="overlay picture (PNG) of every run's losses")
    ap.add_argument("--tol", type=float, default=None, help="exit 1 if a metric's largest relative difference exceeds it")
    ap.add_argument("--expect-equal", action="store_true", help="exit 1 unless everything is bitwise equal")
    a = ap.parse_args(argv)
    if len(a.runs) < 2 and not a.plot:
        raise InputError("give at least two runs to compare (or one with -o to draw it)")
    logs = [read_log(r) for r in a.runs]
    fail = []
    base, blog = a.runs[0], logs[0]
    check = a.tol is not None or a.expect_equal
    for run, log in zip(a.runs[1:], logs[1:]):
        print("%s vs %s" % (run, base))
        for m in METRICS:
            for who, x, y in ((base, blog[m], log[m]), (run, log[m], blog[m])):
                only = sorted(set(x) - set(y))
                if only:
                    print("  %-10s %4d step%s only in %s: %s" % (m, len(only), "" if len(only) == 1 else "s", who, ranges(only)))
                    if check:
                        fail.append("%s: %s logged at step%s %s only in %s" % (run, m, "" if len(only) == 1 else "s", ranges(only), who))
                bad = nonfinite(x)
                if bad:
                    print("  %-10s %s is not finite at step%s %s (%s)" % (m, who, "" if len(bad) == 1 else "s", ranges(bad), x[bad[0]]))
                    if check:
                        fail.append("%s: %s is %s at step %d" % (who, m, x[bad[0]], bad[0]))
            c = compare_metric(blog[m], log[m])
            if c is None:
                continue
            if m == "val_loss":
                vt = sorted(s for s in set(blog["val_tokens"]) & set(log["val_tokens"]) if blog["val_tokens"][s] != log["val_tokens"][s])
                if vt:
                    s0 = vt[0]
                    print("  val_loss   over different val sets: %s and %s tokens at step %d (-m x -b x -t differ): "
                          "not the same measurement" % (blog["val_tokens"][s0], log["val_tokens"][s0], s0))
                    if check:
                        fail.append("%s val_loss: another val set (%s vs %s tokens)" % (run, log["val_tokens"][s0], blog["val_tokens"][s0]))
            print("  %-10s %4d steps %d..%d: max abs diff %.3e (step %d), max rel diff %.3e (step %d)%s, %s" % (
                m, c["n"], c["steps"][0], c["steps"][1], c["abs"], c["abs_at"], c["rel"], c["rel_at"],
                " over the finite ones (%d not finite)" % c["nonfinite"] if c["nonfinite"] else "",
                "bitwise equal (every printed value)" if c["equal"] else "first differs at step %d" % c["first"]))
            if a.tol is not None and c["rel"] > a.tol:
                fail.append("%s %s: max rel diff %.3e > --tol %g" % (run, m, c["rel"], a.tol))
            if a.expect_equal and not c["equal"]:
                fail.append("%s %s: differs from step %d" % (run, m, c["first"]))
        cb, cr = checkpoints(base), checkpoints(run)
        for who, x, y in ((base, cb, cr), (run, cr, cb)):
            only = sorted(x - y)
            if only:   # an interrupt's checkpoint, another -n: named, not a difference (the steps both saved are compared)
                print("  checkpoints only in %s: step%s %s (not compared)" % (who, "" if len(only) == 1 else "s", ranges(only)))
            for s in sorted(x):   # but half a pair is an incomplete checkpoint: a model without its state, a state without its model
                hm, hs = (os.path.isfile(os.path.join(who, "%s_%08d.bin" % (k, s))) for k in ("model", "state"))
                if check and has_states(who) and hm != hs:
                    fail.append("%s: %s_%08d.bin without %s_%08d.bin (an incomplete checkpoint)" % (who, *(("model", s, "state", s) if hm else ("state", s, "model", s))))
        if check and (cb or cr) and not (cb & cr):
            fail.append("%s: no checkpoint step both runs saved (%s: %s; %s: %s): nothing to compare bitwise" % (
                run, base, ranges(sorted(cb)) or "none", run, ranges(sorted(cr)) or "none"))
        for s in sorted(cb & cr):
            for kind in ("model", "state"):
                p, q = os.path.join(base, "%s_%08d.bin" % (kind, s)), os.path.join(run, "%s_%08d.bin" % (kind, s))
                if os.path.isfile(p) != os.path.isfile(q):   # a stop that lost its state: never equal
                    print("  %s_%08d.bin: only in %s" % (kind, s, base if os.path.isfile(p) else run))
                    if check:
                        fail.append("%s: %s_%08d.bin only in %s" % (run, kind, s, base if os.path.isfile(p) else run))
                    continue
                if not (os.path.isfile(p) and os.path.isfile(q)):
                    continue
                if same_bytes(p, q):
                    print("  %s_%08d.bin: byte-identical" % (kind, s))
                    continue
                print("  %s_%08d.bin: differs" % (kind, s))
                if a.expect_equal:
                    fail.append("%s %s_%08d.bin differs" % (run, kind, s))
                require("numpy")
                rd = model_tensors if kind == "model" else state_arrays
                for line in diff_arrays(rd(p), rd(q), "%s vs %s" % (p, q)):
                    print(line)
    if a.plot:
        overlay(a.runs, logs, a.plot)
    for f in fail:
        print("FAIL %s" % f)
    return 1 if fail else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
