#!/usr/bin/python3
"""plot.py: pictures of what the trainer prints and traces (matplotlib, PNG).

Subcommands (each writes one PNG with -o; every input is a file the trainer
or a dev/ script wrote, parsed as the text the trainer prints today):

  loss     [-o loss.png] RUN ...        train and val loss per step of one or
                                        more runs: RUN is an output dir (-o DIR
                                        of the trainer, holding main.log) or a
                                        main.log; LABEL=RUN names the curve
  memory   [-o memory.png] STDOUT ...   the memory ledger of runs at several
                                        stages: per configuration, stacked bars
                                        per ledger category for predicted,
                                        allocated and the ZeRO paper's formula
                                        (model states only); one panel per N
  traffic  [-o traffic.png] STDOUT ...  the traffic table at the end of each
                                        run: wire volume per optimizer step in
                                        units of Psi, stacked by collective (at
                                        stage 3 the all-gather split by unit
                                        class), beside the paper's 2 / 3 Psi
  cluster  [-o cluster.png] TSV         step time vs link rate per
                                        configuration from dev/cluster_bench.sh
                                        (build/cluster_bench/results.tsv)
  timeline [-o timeline.png] TRACE ...  one step of each trace (--trace of the
                                        trainer): bytes in use stacked by
                                        category over time, and below it the
                                        compute and comm tracks as bars
  dump     KIND FILE                    print what a parser read, as JSON
                                        (KIND: log, ledger, traffic, header,
                                        cluster, trace)
  all      [--out docs/img ...]         run the trainer on the default model
                                        (stages 0-3 and stage 3 with
                                        --reshard-after-forward 0, at N = 2
                                        and 4, and one longer run for the loss)
                                        and write every picture (make plots)

STDOUT is a file holding what rank 0 of a trainer run printed (its
"memory ledger, rank ..." table at the start, its "traffic, rank ..." table
at the end); LABEL=FILE overrides the configuration label read from the
run's first line. Sizes in the pictures are MB = 1e6 bytes, as the trainer
prints them. Bad input: one line "error: <file>: <rule>", exit 1.
"""
import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

MB = 1e6


class InputError(Exception):
    """Bad input: the message is 'FILE: the rule it broke'."""


# --------------------------------------------------------------------------
# Parsers: text the trainer prints -> plain Python values (numbers exactly as
# printed: byte counts as int, ratios as float)

def _split_cols(line):
    """Columns of a table line: fields separated by two or more spaces."""
    return [c for c in re.split(r"\s{2,}", line.strip()) if c != ""]


def _is_num(s):
    return re.fullmatch(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", s) is not None


def _num(s):
    return int(s) if re.fullmatch(r"-?[0-9]+", s) else float(s)


def _col_ends(header, names):
    """End position of each column name in a header line (the trainer
    right-aligns a column's numbers under the end of its name)."""
    ends, pos = [], 0
    for n in names:
        i = header.find(n, pos)
        if i < 0:
            return None
        ends.append(i + len(n))
        pos = i + len(n)
    return ends


def _table_row(line, columns, ends):
    """One row of a right-aligned table -> (name, {column: number}, note).
    Numbers are matched to columns by where they end (so a note such as
    '4 Psi/N' or a name with digits is not taken for a column); a row whose
    fields are shifted (a name longer than its field) is read in order: name
    = words up to the first number, then one number per column."""
    toks = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", line)]
    vals, first, last = {}, None, None
    if ends:
        for k, (a, b, w) in enumerate(toks):
            if _is_num(w) and b in ends and k > 0:
                vals[columns[ends.index(b)]] = _num(w)
                first = k if first is None else first
                last = k
        if vals and all(_is_num(toks[k][2]) for k in range(first, last + 1)) and last - first + 1 == len(vals):
            name = " ".join(w for _, _, w in toks[:first])
            note = " ".join(w for _, _, w in toks[last + 1:])
            return name, vals, note
    words = [w for _, _, w in toks]
    k = 0
    while k < len(words) and not _is_num(words[k]):
        k += 1
    name = " ".join(words[:k])
    nums = []
    while k < len(words) and _is_num(words[k]) and len(nums) < len(columns):
        nums.append(_num(words[k]))
        k += 1
    return name, dict(zip(columns, nums)), " ".join(words[k:])


def parse_main_log(text, path="main.log"):
    """main.log (-o DIR of the trainer) -> {"train": {step: {key: value}},
    "val": {step: loss}}. Lines: 'step S train_loss X lr L norm N ms M
    tok_per_s T' (after optimizer step S) and 'step S val_loss X' (before step
    S+1). A step that occurs twice (a resumed run appends) keeps the last."""
    train, val = {}, {}
    for i, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if not f:
            continue
        if len(f) < 4 or f[0] != "step" or not re.fullmatch(r"[0-9]+", f[1]) or len(f) % 2 != 0:
            raise InputError("%s: line %d: expected 'step S key value ...', got %r" % (path, i, line[:80]))
        kv = {}
        for k, v in zip(f[2::2], f[3::2]):
            if not _is_num(v) and v not in ("nan", "inf", "-nan", "-inf"):
                raise InputError("%s: line %d: value of %s is not a number: %r" % (path, i, k, v))
            kv[k] = float(v)
        step = int(f[1])
        if "val_loss" in kv:
            val[step] = kv["val_loss"]
        elif "train_loss" in kv:
            train[step] = kv
        else:
            raise InputError("%s: line %d: neither train_loss nor val_loss" % (path, i))
    if not train and not val:
        raise InputError("%s: no step lines (is it a trainer's main.log?)" % path)
    return {"train": train, "val": val}


def parse_header(text, path="stdout"):
    """The run's configuration from its first lines: {"backend", "num_ranks",
    "zero_stage", "reshard_after_forward" (None below stage 3), "label"}."""
    m = re.search(r"^train_gpt \(([^)]*)\): (\d+) ranks?, zero_stage (\d)(?:, reshard_after_forward (\d))?",
                  text, re.M)
    if not m:
        # a ledger alone still says N and the stage
        led = re.search(r"^memory ledger, rank \d+ of (\d+), zero_stage (\d)", text, re.M)
        if not led:
            raise InputError("%s: no 'train_gpt (...): N ranks, zero_stage S' line (not a trainer's stdout?)" % path)
        n, z, r, backend = int(led.group(1)), int(led.group(2)), None, None
    else:
        backend, n, z = m.group(1), int(m.group(2)), int(m.group(3))
        r = int(m.group(4)) if m.group(4) is not None else None
    label = "z%d" % z + (" reshard 0" if z == 3 and r == 0 else "")
    return {"backend": backend, "num_ranks": n, "zero_stage": z, "reshard_after_forward": r, "label": label}


def parse_ledger(text, path="stdout", rank=0):
    """The 'memory ledger, rank R of N, zero_stage S: ...' table of rank
    `rank` -> {"rank", "num_ranks", "zero_stage", "psi", "padded",
    "per_shard", "p", "g", "k", "columns": [column names after 'category'],
    "rows": [{"category", "values": {column: bytes}, "note"}] (one per
    category, in printed order), "sums": {"= model states": {...}, "= total":
    {...}}, "notes": [lines of text in the table], "ok": bool, "peak_mb",
    "gathered_peak_mb" (from the 'peak:' line, None if absent)}. A row
    indented deeper than the categories is a part of the category above: it
    goes to that row's "parts" [{"name", "values", "note"}] and is not a
    category. Categories are read generically (any name in the first
    column), so new ones and new columns need no change here."""
    lines = text.splitlines()
    head_re = re.compile(r"^memory ledger, rank (\d+) of (\d+), zero_stage (\d): Psi = (\d+) parameters "
                         r"\((\d+) padded, (\d+) per shard\), p=(\d+) g=(\d+) k=(\d+) bytes/param")
    start = None
    for i, l in enumerate(lines):
        m = head_re.match(l)
        if m and int(m.group(1)) == rank:
            start = i
            break
    if start is None:
        raise InputError("%s: no 'memory ledger, rank %d of N, zero_stage S: Psi = ...' table" % (path, rank))
    g = [int(x) for x in m.groups()]
    out = {"rank": g[0], "num_ranks": g[1], "zero_stage": g[2], "psi": g[3], "padded": g[4], "per_shard": g[5],
           "p": g[6], "g": g[7], "k": g[8], "rows": [], "sums": {}, "notes": [], "ok": None}
    if start + 1 >= len(lines):
        raise InputError("%s: ledger table ends after its title" % path)
    cols = _split_cols(lines[start + 1])
    if not cols or cols[0] != "category":
        raise InputError("%s: line %d: ledger header must start with 'category'" % (path, start + 2))
    out["columns"] = cols[1:]
    ends = _col_ends(lines[start + 1], out["columns"])
    for j in range(start + 2, len(lines)):
        l = lines[j]
        s = l.strip()
        if s.startswith("ledger:"):
            out["ok"] = s.startswith("ledger: OK")
            break
        if not l.startswith("  ") or not s:
            raise InputError("%s: line %d: ledger table ends without its 'ledger:' line" % (path, j + 1))
        name, vals, note = _table_row(l, out["columns"], ends)
        if not name or not vals:
            out["notes"].append(s)  # a line of text inside the table ("live at the peak: ...")
        elif name.startswith("="):
            out["sums"][name] = {"values": vals, "note": note}
        elif l.startswith("   ") and out["rows"]:
            # indented deeper: a part of the category above (e.g. a transient by unit class)
            out["rows"][-1]["parts"].append({"name": name, "values": vals, "note": note})
        else:
            out["rows"].append({"category": name, "values": vals, "note": note, "parts": []})
    if out["ok"] is None:
        raise InputError("%s: ledger table ends without its 'ledger:' line" % path)
    pk = re.search(r"^peak: ledger ([0-9.]+) MB \(gathered units in use at most ([0-9.]+) MB\)", text, re.M)
    out["peak_mb"] = float(pk.group(1)) if pk else None
    out["gathered_peak_mb"] = float(pk.group(2)) if pk else None
    return out


def parse_traffic(text, path="stdout", rank=0):
    """The last 'traffic, rank R of N, zero_stage S, K optimizer steps x A
    micro-steps' table of rank `rank` -> {"rank", "num_ranks", "zero_stage",
    "steps", "micro_steps", "columns", "rows": [{"collective", "values":
    {column: number}}], "volume_psi" (None on 1 rank), "classes": [{"name",
    "psi", "times", "share_pct", "mode"}] (stage 3's all-gathers by unit
    class), "ok": bool}."""
    lines = text.splitlines()
    head_re = re.compile(r"^traffic, rank (\d+) of (\d+), zero_stage (\d), (\d+) optimizer steps x (\d+) micro-steps")
    start = None
    for i, l in enumerate(lines):
        m = head_re.match(l)
        if m and int(m.group(1)) == rank:
            start, mm = i, m
    if start is None:
        raise InputError("%s: no 'traffic, rank %d of N, zero_stage S, ...' table (did the run finish?)" % (path, rank))
    g = [int(x) for x in mm.groups()]
    out = {"rank": g[0], "num_ranks": g[1], "zero_stage": g[2], "steps": g[3], "micro_steps": g[4],
           "rows": [], "volume_psi": None, "classes": [], "ok": None}
    cols = _split_cols(lines[start + 1]) if start + 1 < len(lines) else []
    if not cols or cols[0] != "collective":
        raise InputError("%s: line %d: traffic header must start with 'collective'" % (path, start + 2))
    out["columns"] = cols[1:]
    ends = _col_ends(lines[start + 1], out["columns"])
    for j in range(start + 2, len(lines)):
        s = lines[j].strip()
        if s.startswith("traffic:"):
            out["ok"] = s.startswith("traffic: OK")
            break
        m = re.match(r"^volume per optimizer step: ([0-9.]+) Psi", s)
        if m:
            out["volume_psi"] = float(m.group(1))
            continue
        if s.startswith("stage-3 all-gathers by unit class"):
            body = s.split(":", 1)[1]
            for part in body.split(";"):
                c = re.match(r"^\s*(.+?) ([0-9.]+) Psi \((\d+) x ([0-9.]+)% of Psi: ([^)]*)\)\s*$", part)
                if not c:
                    raise InputError("%s: line %d: unit class entry not 'NAME X Psi (T x P%% of Psi: MODE)': %r"
                                     % (path, j + 1, part.strip()))
                out["classes"].append({"name": c.group(1), "psi": float(c.group(2)), "times": int(c.group(3)),
                                       "share_pct": float(c.group(4)), "mode": c.group(5)})
            continue
        if s.startswith("single rank"):
            continue
        name, vals, note = _table_row(lines[j], out["columns"], ends)
        if not name or len(vals) != len(out["columns"]):
            raise InputError("%s: line %d: traffic row is not 'collective' and %d numbers: %r"
                             % (path, j + 1, len(out["columns"]), s))
        out["rows"].append({"collective": name, "values": vals})
    if out["ok"] is None:
        raise InputError("%s: traffic table ends without its 'traffic:' line" % path)
    return out


def parse_cluster_tsv(text, path="results.tsv"):
    """dev/cluster_bench.sh's results.tsv -> list of rows {column: value};
    numbers become float, '-' becomes None; 'rate' becomes bits/s in
    'rate_bps' (None for 'none', no limit)."""
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        raise InputError("%s: empty" % path)
    cols = lines[0].split("\t")
    need = ["layout", "config", "rate", "ms_per_step"]
    for c in need:
        if c not in cols:
            raise InputError("%s: header lacks column '%s' (is it dev/cluster_bench.sh's results.tsv?)" % (path, c))
    rows = []
    for i, l in enumerate(lines[1:], 2):
        f = l.split("\t")
        if len(f) != len(cols):
            raise InputError("%s: line %d: %d fields, the header has %d" % (path, i, len(f), len(cols)))
        r = {}
        for c, v in zip(cols, f):
            if c in ("layout", "config", "rate"):
                r[c] = v
            elif v == "-" or v == "":
                r[c] = None
            elif _is_num(v):
                r[c] = float(v)
            else:
                raise InputError("%s: line %d: %s = %r is not a number or '-'" % (path, i, c, v))
        m = re.fullmatch(r"([0-9.]+)(bit|kbit|mbit|gbit)", r["rate"].lower())
        if r["rate"] == "none":
            r["rate_bps"] = None
        elif m:
            r["rate_bps"] = float(m.group(1)) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]
        else:
            raise InputError("%s: line %d: rate %r is not 'none' or a tc rate like 100mbit" % (path, i, r["rate"]))
        if r["ms_per_step"] is None:
            raise InputError("%s: line %d: ms_per_step missing" % (path, i))
        rows.append(r)
    return rows


# --------------------------------------------------------------------------
# Trace (Chrome trace-event JSON, what Perfetto opens): pid = rank, tid 0 =
# compute, tid 1 = comm; "B"/"E" duration events ("X" with "dur" accepted
# too), "C" counter events named "memory" whose args are bytes per category.

def load_trace(path):
    """Read a trace file -> the JSON object (InputError if it is not one)."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except OSError as e:
        raise InputError("%s: cannot read (%s)" % (path, e.strerror))
    except ValueError as e:
        raise InputError("%s: not valid JSON (%s)" % (path, e))
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise InputError("%s: not a trace-event object with a 'traceEvents' list" % path)
    return obj


def trace_spans(obj, path="trace"):
    """Duration events -> {(pid, tid): [{"name", "ts", "end", "depth",
    "parent", "args"}]} sorted by start, with nesting depth (0 = outermost)
    and the name of the enclosing event ("parent")."""
    stacks, spans = {}, {}
    for ev in obj["traceEvents"]:
        ph = ev.get("ph")
        if ph not in ("B", "E", "X"):
            continue
        key = (ev.get("pid"), ev.get("tid"))
        st = stacks.setdefault(key, [])
        lst = spans.setdefault(key, [])
        if ph == "X":
            sp = {"name": ev.get("name"), "ts": float(ev["ts"]), "end": float(ev["ts"]) + float(ev.get("dur", 0)),
                  "depth": len(st), "parent": st[-1]["name"] if st else None, "args": ev.get("args", {})}
            lst.append(sp)
        elif ph == "B":
            sp = {"name": ev.get("name"), "ts": float(ev["ts"]), "end": None, "depth": len(st),
                  "parent": st[-1]["name"] if st else None, "args": ev.get("args", {})}
            st.append(sp)
            lst.append(sp)
        else:
            if not st:
                raise InputError("%s: 'E' event at ts %s on pid %s tid %s has no open 'B'" % (path, ev.get("ts"), *key))
            sp = st.pop()
            sp["end"] = float(ev["ts"])
            if ev.get("args"):
                sp["args"] = dict(sp["args"], **ev["args"])
    for key, st in stacks.items():
        if st:
            raise InputError("%s: pid %s tid %s: '%s' never ends" % (path, key[0], key[1], st[-1]["name"]))
    for lst in spans.values():
        lst.sort(key=lambda s: (s["ts"], s["depth"]))
    return spans


def trace_memory(obj, pid):
    """Memory counter events of rank `pid` -> (times in us, {category:
    [bytes at each time]}), values carried forward when an event names only
    some categories."""
    evs = [e for e in obj["traceEvents"] if e.get("ph") == "C" and e.get("name") == "memory" and e.get("pid") == pid]
    evs.sort(key=lambda e: float(e["ts"]))
    cats, cur, times, series = [], {}, [], {}
    for e in evs:
        for k in e.get("args", {}):
            if k not in cats:
                cats.append(k)
    for e in evs:
        cur.update({k: float(v) for k, v in e.get("args", {}).items()})
        times.append(float(e["ts"]))
        for k in cats:
            series.setdefault(k, []).append(cur.get(k, 0.0))
    return times, series


def trace_info(obj, path="trace", rank=0, step=None):
    """The step window of one rank: {"stage", "num_ranks", "label", "step",
    "t0", "t1", "spans", "mem"}; step None = the last complete 'step S' on
    the compute track."""
    md = obj.get("metadata", {}) or {}
    spans = trace_spans(obj, path)
    comp = spans.get((rank, 0), [])
    steps = [s for s in comp if s["depth"] == 0 and re.fullmatch(r"step \d+", s["name"] or "")]
    if not steps:
        raise InputError("%s: rank %d has no 'step S' event on its compute track (tid 0)" % (path, rank))
    if step is None:
        sel = steps[-1]
    else:
        sel = next((s for s in steps if s["name"] == "step %d" % step), None)
        if sel is None:
            raise InputError("%s: no 'step %d' on rank %d (the trace has %s)" % (path, step, rank,
                                                                                ", ".join(s["name"] for s in steps)))
    z = md.get("zero_stage")
    r = md.get("reshard_after_forward")
    label = "stage %s" % z if z is not None else os.path.basename(path)
    if z == 3 and r is not None:
        label += ", reshard %s" % r
    return {"stage": z, "num_ranks": md.get("num_ranks"), "label": label, "step": int(sel["name"].split()[1]),
            "t0": sel["ts"], "t1": sel["end"], "spans": spans, "mem": trace_memory(obj, rank)}


# --------------------------------------------------------------------------
# Figures

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 100})
    return plt


def _save(fig, out):
    d = os.path.dirname(out)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    try:  # a 256-colour palette: the same picture in about half the bytes
        from PIL import Image
        with Image.open(tmp) as im:
            q = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        q.save(tmp, optimize=True)
    except ImportError:
        pass
    os.replace(tmp, out)
    print("wrote %s (%d bytes)" % (out, os.path.getsize(out)))


# fixed colours per ledger category (by the name without "(transient)"), so
# every picture paints a category the same; other names get the next free one
_CAT_COLORS = {
    "params": "#1f77b4", "grads": "#ff7f0e", "master weights": "#8c564b", "adam m": "#2ca02c", "adam v": "#98df8a",
    "activations": "#c7c7c7", "gathered units": "#d62728", "unit grads": "#9467bd", "comm scratch": "#bcbd22",
    "gathered embedding rows": "#17becf", "embedding grad accumulator": "#e377c2",
}
_SPARE = ["#aec7e8", "#ffbb78", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#7f7f7f", "#393b79"]


def _cat_key(name):
    return re.sub(r"\s*\(transient\)\s*$", "", name).strip()


def cat_color(name, _assigned={}):
    k = _cat_key(name)
    if k in _CAT_COLORS:
        return _CAT_COLORS[k]
    if k not in _assigned:
        _assigned[k] = _SPARE[len(_assigned) % len(_SPARE)]
    return _assigned[k]


def _labelled(arg):
    """'LABEL=PATH' -> (label, path); 'PATH' -> (None, PATH)."""
    if "=" in arg and not os.path.exists(arg):
        lab, p = arg.split("=", 1)
        return lab, p
    return None, arg


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        raise InputError("%s: cannot read (%s)" % (path, e.strerror))


def plot_loss(runs, out, title=None):
    """runs: list of (label, dir or main.log path)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    cyc = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    last_train = []
    for i, (label, p) in enumerate(runs):
        path = os.path.join(p, "main.log") if os.path.isdir(p) else p
        log = parse_main_log(_read(path), path)
        lab = label or os.path.basename(os.path.dirname(os.path.abspath(path)))
        c = cyc[i % len(cyc)]
        if log["train"]:
            s = sorted(log["train"])
            ax.plot(s, [log["train"][k]["train_loss"] for k in s], color=c, lw=1.2, label="%s: train" % lab)
            last_train.append(log["train"][s[-1]]["train_loss"])
        if log["val"]:
            s = sorted(log["val"])
            ax.plot(s, [log["val"][k] for k in s], color=c, lw=1.2, ls="--", marker="o", ms=4,
                    label="%s: val" % lab)
            for k in (s[0], s[-1]):  # each run's labels one line above the previous run's, so they never overprint
                ax.annotate("%.3f" % log["val"][k], (k, log["val"][k]), textcoords="offset points", xytext=(4, 4 + 9 * i),
                            fontsize=7, color=c)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats per token)")
    ax.set_title(title or "Loss per optimizer step (train: mean over the step's tokens; val: before the step)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    fig.tight_layout()
    _save(fig, out)


def _runs_from_stdouts(files, need_traffic=False):
    """-> list of dicts {label, n, stage, reshard, ledger, traffic, path}."""
    runs = []
    for arg in files:
        lab, p = _labelled(arg)
        text = _read(p)
        h = parse_header(text, p)
        r = {"label": lab or h["label"], "n": h["num_ranks"], "stage": h["zero_stage"],
             "reshard": h["reshard_after_forward"], "path": p, "ledger": parse_ledger(text, p)}
        if need_traffic:
            r["traffic"] = parse_traffic(text, p)
        runs.append(r)
    if not runs:
        raise InputError("no runs given")
    return runs


def _by_n(runs):
    ns = sorted(set(r["n"] for r in runs))
    return ns, {n: [r for r in runs if r["n"] == n] for n in ns}


def plot_memory(files, out, title=None):
    plt = _plt()
    from matplotlib.patches import Patch
    runs = _runs_from_stdouts(files)
    ns, groups = _by_n(runs)
    # categories in printed order, over all runs; zero everywhere = dropped
    cats = []
    for r in runs:
        for row in r["ledger"]["rows"]:
            if row["category"] not in cats:
                cats.append(row["category"])

    def val(r, cat, col):
        for row in r["ledger"]["rows"]:
            if row["category"] == cat:
                return row["values"].get(col)
        return None
    used = [c for c in cats if any((val(r, c, "allocated B") or 0) > 0 or (val(r, c, "predicted B") or 0) > 0
                                   for r in runs)]
    # (column, legend, hatch, alpha): allocated hatched, the paper's formula pale
    kinds = [("predicted B", "predicted", None, 1.0), ("allocated B", "allocated", "//", 1.0),
             ("paper formula B", "paper formula (model states)", None, 0.45)]
    fig, axes = plt.subplots(1, len(ns), figsize=(4.5 * len(ns) + 2.0, 5.25), sharey=True, squeeze=False)
    axes = axes[0]
    ymax = 0
    for ax, n in zip(axes, ns):
        rs = groups[n]
        w = 0.27
        for gi, r in enumerate(rs):
            for ki, (col, kname, hatch, alpha) in enumerate(kinds):
                x = gi + (ki - 1) * w
                bottom = 0.0
                for c in used:
                    v = val(r, c, col)
                    if not v:
                        continue
                    ax.bar(x, v / MB, w * 0.92, bottom=bottom, color=cat_color(c), hatch=hatch, alpha=alpha,
                           edgecolor="white" if hatch is None else "#555555", linewidth=0.3)
                    bottom += v / MB
                ymax = max(ymax, bottom)
                if bottom > 0:
                    ax.text(x, bottom, "%.0f" % bottom, ha="center", va="bottom", fontsize=6.5)
            pk = r["ledger"].get("peak_mb")
            if pk is not None:
                ax.plot([gi - 1.5 * w, gi + 1.5 * w], [pk, pk], color="black", lw=1.0, ls=":")
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([r["label"] for r in rs], rotation=0)
        led = rs[0]["ledger"]
        ax.set_title("N = %d ranks (rank %d), Psi = %.2fM" % (n, led["rank"], led["psi"] / 1e6))
        ax.set_xlabel("configuration (bars: predicted | allocated | paper)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("bytes per rank (MB)")
    axes[0].set_ylim(0, ymax * 1.15)
    handles = [Patch(facecolor=cat_color(c), label=c) for c in used]
    handles += [Patch(facecolor="#999999", alpha=al, edgecolor="#555555" if h else "#999999", hatch=h, label=k)
                for _, k, h, al in kinds]
    from matplotlib.lines import Line2D
    handles.append(Line2D([], [], color="black", ls=":", label="peak of the ledger"))
    fig.legend(handles=handles, loc="center right", frameon=False)
    fig.suptitle(title or "Memory per rank by ledger category: predicted vs allocated vs the ZeRO paper's formula")
    fig.tight_layout(rect=(0, 0, 1 - 1.9 / (4.5 * len(ns) + 2.0), 0.96))
    _save(fig, out)


def plot_traffic(files, out, title=None):
    plt = _plt()
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    runs = _runs_from_stdouts(files, need_traffic=True)
    ns, groups = _by_n(runs)
    colls = []
    for r in runs:
        for row in r["traffic"]["rows"]:
            if row["collective"] not in colls:
                colls.append(row["collective"])
    ccol = {"all-reduce": "#7f7f7f", "reduce-scatter": "#ff7f0e", "all-gather": "#1f77b4"}
    spare = ["#17becf", "#bcbd22", "#e377c2", "#8c564b", "#9467bd"]
    classes_hatch = ["", "//", "xx", "..", "\\\\", "oo"]
    handles, seen = [], set()
    class_names = []
    for r in runs:
        for c in r["traffic"]["classes"]:
            if c["name"] not in class_names:
                class_names.append(c["name"])

    def color(c):
        if c not in ccol:
            ccol[c] = spare[(len(ccol) - 3) % len(spare)]
        return ccol[c]
    fig, axes = plt.subplots(1, len(ns), figsize=(4.5 * len(ns) + 3.0, 4.75), sharey=True, squeeze=False)
    axes = axes[0]
    ymax = 0
    for ax, n in zip(axes, ns):
        rs = groups[n]
        for gi, r in enumerate(rs):
            t = r["traffic"]
            bottom, wire = 0.0, 0
            for row in t["rows"]:
                v = row["values"].get("Psi/step", 0) or 0
                wire += row["values"].get("ring wire B", 0) or 0
                if v <= 0:
                    continue
                name = row["collective"]
                if name == "all-gather" and t["classes"]:
                    # stage 3: split by unit class (padded elements; sums to the row)
                    for ci, c in enumerate(t["classes"]):
                        h = classes_hatch[class_names.index(c["name"]) % len(classes_hatch)]
                        ax.bar(gi, c["psi"], 0.6, bottom=bottom, color=color(name), hatch=h, edgecolor="white",
                               linewidth=0.4)
                        bottom += c["psi"]
                else:
                    ax.bar(gi, v, 0.6, bottom=bottom, color=color(name), edgecolor="white", linewidth=0.4)
                    bottom += v
                if name not in seen:
                    seen.add(name)
                    handles.append(Patch(facecolor=color(name), label=name))
            paper = 3.0 if r["stage"] == 3 else 2.0
            ax.plot([gi - 0.38, gi + 0.38], [paper, paper], color="black", lw=1.5, ls="--")
            per_step_mb = wire / max(t["steps"], 1) / MB
            ax.text(gi, max(bottom, paper) + 0.05, "%.3f Psi\n%.1f MB" % (t["volume_psi"] or 0, per_step_mb),
                    ha="center", va="bottom", fontsize=7)
            ymax = max(ymax, bottom, paper)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([r["label"] for r in rs])
        ax.set_title("N = %d ranks (rank %d)" % (n, rs[0]["traffic"]["rank"]))
        ax.set_xlabel("configuration")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("wire volume per optimizer step (Psi)")
    axes[0].set_ylim(0, ymax * 1.25)
    for ci, c in enumerate(class_names):
        handles.append(Patch(facecolor="#1f77b4", edgecolor="white", hatch=classes_hatch[ci % len(classes_hatch)],
                             label="all-gather: %s" % c))
    handles.append(Line2D([], [], color="black", ls="--", label="ZeRO paper: 2 Psi (stages 0-2),\n3 Psi (stage 3)"))
    fig.legend(handles=handles, loc="center right", frameon=False)
    fig.suptitle(title or "Traffic per rank and optimizer step (ring wire bytes / (bytes per element x (N-1)/N x Psi))")
    fig.tight_layout(rect=(0, 0, 1 - 2.95 / (4.5 * len(ns) + 3.0), 0.95))
    _save(fig, out)


def plot_cluster(path, out, title=None):
    plt = _plt()
    from matplotlib.lines import Line2D
    rows = parse_cluster_tsv(_read(path), path)
    layouts = []
    for r in rows:
        if r["layout"] not in layouts:
            layouts.append(r["layout"])
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    cyc = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(layouts), figsize=(4.5 * len(layouts) + 0.5, 4.5), sharey=True, squeeze=False)
    axes = axes[0]
    rates_all = sorted(set(r["rate_bps"] for r in rows if r["rate_bps"]))
    for ax, lay in zip(axes, layouts):
        for ci, cfg in enumerate(configs):
            rs = [r for r in rows if r["layout"] == lay and r["config"] == cfg]
            lim = sorted((r for r in rs if r["rate_bps"]), key=lambda r: r["rate_bps"])
            c = cyc[ci % len(cyc)]
            if lim:
                ax.plot([r["rate_bps"] / 1e9 for r in lim], [r["ms_per_step"] for r in lim], color=c, marker="o", ms=4,
                        lw=1.4)
                pr = [(r["rate_bps"] / 1e9, r["predicted_ms"]) for r in lim if r.get("predicted_ms") is not None]
                if pr:
                    ax.plot(*zip(*pr), color=c, ls=":", marker="x", ms=4, lw=1)
            free = [r for r in rs if r["rate_bps"] is None]
            if free:
                ax.axhline(free[0]["ms_per_step"], color=c, ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        if rates_all:
            ax.set_xticks([b / 1e9 for b in rates_all])
            ax.set_xticklabels(["%g" % (b / 1e9) for b in rates_all])
        k, rr = lay.split("x")
        ax.set_title("%s node%s x %s rank%s per node" % (k, "" if k == "1" else "s", rr, "" if rr == "1" else "s"))
        ax.set_xlabel("link rate (Gbit/s)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("time per optimizer step (ms)")
    handles = [Line2D([], [], color=cyc[i % len(cyc)], marker="o", label=c) for i, c in enumerate(configs)]
    handles += [Line2D([], [], color="black", ls=":", marker="x", label="predicted: no-limit time + link bytes / rate"),
                Line2D([], [], color="black", ls="--", label="no link limit")]
    axes[-1].legend(handles=handles, loc="upper right")
    fig.suptitle(title or "Step time vs link rate on a simulated cluster (dev/cluster_bench.sh)")
    fig.tight_layout()
    _save(fig, out)


# track colours, chosen apart from the ledger categories' (Set2 / Dark2)
_PHASE_COLORS = {"forward": "#8da0cb", "backward": "#e5c494", "reduce grads": "#fc8d62", "optimizer": "#a6d854"}
_PHASE_SPARE = ["#b3b3b3", "#ffd92f", "#66c2a5"]
_WAIT_COLOR = "#333333"
_COMM_COLORS = {"all-gather": "#e7298a", "reduce-scatter": "#1b9e77", "all-reduce": "#7570b3",
                "embedding rows all-gather": "#a6761d"}
_COMM_SPARE = ["#d95f02", "#66a61e", "#e6ab02", "#666666"]


def plot_timeline(traces, out, rank=0, step=None, title=None):
    """traces: list of (label, path). Per trace: a memory panel (stacked
    bytes in use per category over one step), the categories that change
    during the step on their own scale (the gathered units, unit grads), and
    a track panel (phase: forward / backward / ...; compute: unit uses and
    waits; comm: the collectives). All panels share the time and byte
    scales, so stages compare at a glance."""
    plt = _plt()
    from matplotlib.patches import Patch
    infos = []
    for lab, p in traces:
        info = trace_info(load_trace(p), p, rank, step)
        if lab:
            info["label"] = lab
        infos.append(info)
    n = len(infos)
    H = 3.0 * n + 1.25
    fig = plt.figure(figsize=(10, H))
    outer = fig.add_gridspec(n, 1, hspace=0.34)
    all_cats, comm_kinds, phase_names = [], [], []
    ymax, dmax = 0, 0
    mem_axes, dyn_axes = [], []
    order = {"params": 0, "grads": 1, "master weights": 2, "adam m": 3, "adam v": 4, "activations": 5}
    for i, info in enumerate(infos):
        inner = outer[i].subgridspec(3, 1, height_ratios=[1.7, 1.1, 1.0], hspace=0.07)
        axm = fig.add_subplot(inner[0])
        axd = fig.add_subplot(inner[1], sharex=axm)
        axt = fig.add_subplot(inner[2], sharex=axm)
        mem_axes.append(axm)
        dyn_axes.append(axd)
        t0, t1 = info["t0"], info["t1"]
        times, series = info["mem"]
        # the state at the step's start, the changes inside it, held to its end
        before = [k for k, t in enumerate(times) if t <= t0]
        idx0 = before[-1] if before else None
        pts = [k for k, t in enumerate(times) if t0 < t <= t1]
        ks = ([idx0] if idx0 is not None else []) + pts
        cats = [c for c in series if any(series[c][k] > 0 for k in ks)]
        # static states at the bottom, transients on top, in counter order
        cats.sort(key=lambda c: order.get(_cat_key(c), 10))
        if ks:
            xs = [0.0] + [(times[k] - t0) / 1000.0 for k in pts] + [(t1 - t0) / 1000.0]
            ys = []
            for c in cats:
                v = [series[c][idx0] if idx0 is not None else 0.0] + [series[c][k] for k in pts]
                ys.append([b / MB for b in v] + [v[-1] / MB])
                if c not in all_cats:
                    all_cats.append(c)
            axm.stackplot(xs, *ys, colors=[cat_color(c) for c in cats], step="post", linewidth=0)
            tot = [sum(col) for col in zip(*ys)]
            ymax = max(ymax, max(tot))
            gi = [c for c in cats if _cat_key(c) == "gathered units"]
            gpk = max(series[gi[0]][k] for k in ks) / MB if gi else 0.0
            axm.text(0.995, 0.95, "peak %.1f MB; gathered units: at most %.1f MB" % (max(tot), gpk),
                     transform=axm.transAxes, ha="right", va="top", fontsize=7.5,
                     bbox=dict(facecolor="white", alpha=0.85, edgecolor="none", pad=1))
            # the categories that change during the step, on their own scale
            dyn = [(c, y) for c, y in zip(cats, ys) if max(y) != min(y)]
            if dyn:
                axd.stackplot(xs, *[y for _, y in dyn], colors=[cat_color(c) for c, _ in dyn], step="post",
                              linewidth=0)
                dmax = max(dmax, max(sum(col) for col in zip(*[y for _, y in dyn])))
            else:
                axd.text(0.5, 0.5, "no category changes during the step", transform=axd.transAxes,
                         ha="center", va="center", fontsize=8, color="#555555")
        else:
            axm.text(0.5, 0.5, "no memory counters in this step", transform=axm.transAxes, ha="center")
        axm.set_ylabel("MB in use")
        axd.set_ylabel("changing\n(MB)")
        axm.set_title("%s: rank %d, step %d, %.1f ms" % (info["label"], rank, info["step"], (t1 - t0) / 1000.0),
                      loc="left", fontsize=9, pad=3)
        axm.grid(alpha=0.3)
        axd.grid(alpha=0.3)
        plt.setp(axm.get_xticklabels(), visible=False)
        plt.setp(axd.get_xticklabels(), visible=False)
        comp = [s for s in info["spans"].get((rank, 0), []) if s["end"] is not None and s["ts"] < t1 and s["end"] > t0]
        comm = [s for s in info["spans"].get((rank, 1), []) if s["end"] is not None and s["ts"] < t1 and s["end"] > t0]

        def seg(s):
            a, b = max(s["ts"], t0), min(s["end"], t1)
            return ((a - t0) / 1000.0, max((b - a) / 1000.0, 1e-6))
        # phases: what the step event encloses directly (forward, backward, ...)
        for s in comp:
            if s["depth"] == 1 and s["name"] != "wait comm":
                if s["name"] not in _PHASE_COLORS:
                    _PHASE_COLORS[s["name"]] = _PHASE_SPARE[(len(_PHASE_COLORS) - 4) % len(_PHASE_SPARE)]
                if s["name"] not in phase_names:
                    phase_names.append(s["name"])
                axt.broken_barh([seg(s)], (2.1, 0.8), facecolors=_PHASE_COLORS[s["name"]], edgecolor="none")
        for s in comp:
            if s["depth"] < 1 or (s["depth"] == 1 and s["name"] != "wait comm"):
                continue
            if s["name"] == "wait comm":
                axt.broken_barh([seg(s)], (1.1, 0.8), facecolors=_WAIT_COLOR, edgecolor="none")
            else:
                axt.broken_barh([seg(s)], (1.1, 0.8), facecolors=_PHASE_COLORS.get(s["parent"], "#bbbbbb"),
                                edgecolor="white", linewidth=0.4)
        for s in comm:
            kind = (s["args"] or {}).get("kind", s["name"])
            if kind not in _COMM_COLORS:
                _COMM_COLORS[kind] = _COMM_SPARE[(len(_COMM_COLORS) - 4) % len(_COMM_SPARE)]
            if kind not in comm_kinds:
                comm_kinds.append(kind)
            axt.broken_barh([seg(s)], (0.1, 0.8), facecolors=_COMM_COLORS[kind], edgecolor="white", linewidth=0.4)
        axt.set_ylim(0, 3)
        axt.set_yticks([0.5, 1.5, 2.5])
        axt.set_yticklabels(["comm", "compute", "phase"])
        axt.grid(axis="x", alpha=0.3)
        axt.set_xlabel("time since the step began (ms)", labelpad=1)
    for axd in dyn_axes:
        axd.set_ylim(0, dmax * 1.1 if dmax > 0 else 1)
    for axm in mem_axes:  # one scale for all: sizes and durations compare across panels
        axm.set_ylim(0, ymax * 1.18 if ymax > 0 else 1)
        axm.set_xlim(0, max((x["t1"] - x["t0"]) / 1000.0 for x in infos))
    h1 = [Patch(facecolor=cat_color(c), label=_cat_key(c)) for c in all_cats]
    h2 = [Patch(facecolor=_PHASE_COLORS[k], label=k) for k in phase_names]
    h2.append(Patch(facecolor=_WAIT_COLOR, label="wait comm"))
    h2 += [Patch(facecolor=_COMM_COLORS[k], label=k) for k in comm_kinds]
    top = 1.0 - 1.2 / H
    fig.legend(handles=h1, title="bytes in use (ledger category)", loc="upper left", ncol=3, frameon=False,
               fontsize=7.5, title_fontsize=8, bbox_to_anchor=(0.06, 1.0 - 0.25 / H))
    fig.legend(handles=h2, title="tracks: phase, compute (unit uses, waits), comm", loc="upper right", ncol=3,
               frameon=False, fontsize=7.5, title_fontsize=8, bbox_to_anchor=(0.99, 1.0 - 0.25 / H))
    fig.suptitle(title or "One training step: bytes in use per ledger category, and the compute and comm tracks",
                 y=1.0 - 0.05 / H)
    fig.subplots_adjust(left=0.08, right=0.98, top=top, bottom=0.5 / H)
    _save(fig, out)


# --------------------------------------------------------------------------
# all: run the default model and write every picture (make plots)

def _run(cmd, log, env=None):
    t = time.time()
    print("  $ %s > %s" % (" ".join(shlex.quote(c) for c in cmd), log), flush=True)
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        tail = _read(log).splitlines()[-5:]
        raise InputError("%s: the run failed (exit %d): %s" % (log, rc, " | ".join(tail)))
    print("    %.1f s" % (time.time() - t), flush=True)


def cmd_all(a):
    mpirun = shlex.split(a.mpirun)
    exe = a.exe
    if not os.access(exe, os.X_OK):
        raise InputError("%s: not built (make %s)" % (exe, os.path.basename(exe)))
    helptext = subprocess.run([exe, "-h"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True).stdout
    can_trace = "--trace" in helptext
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    model = shlex.split(a.model)
    def _run_or_reuse(cmd, log, env):
        if not a.plot_only:
            _run(cmd, log, env)
        elif not os.path.exists(log):  # --plot-only: reuse the runs in --work
            raise InputError("%s: missing (run without --plot-only first)" % log)
    configs = [("z0", ["-z", "0"]), ("z1", ["-z", "1"]), ("z2", ["-z", "2"]), ("z3", ["-z", "3"]),
               ("z3 reshard 0", ["-z", "3", "--reshard-after-forward", "0"])]
    env = dict(os.environ)
    t_start = time.time()
    stdouts, traces = [], []
    for n in [int(x) for x in a.np.split()]:
        for label, flags in configs:
            tag = "n%d_%s" % (n, label.replace(" ", "_"))
            log = os.path.join(a.work, tag + ".txt")
            cmd = mpirun + ["-np", str(n), exe] + model + flags + ["-x", str(a.steps), "-v", "0", "-s", "0"]
            if can_trace and n == int(a.np.split()[0]):
                tr = os.path.join(a.work, tag + ".json")
                cmd += ["--trace", tr] + shlex.split(a.trace_flags)
                traces.append((None, tr))
            _run_or_reuse(cmd, log, env)
            stdouts.append(log)
    loss_dir = os.path.join(a.work, "loss_n%d_z%d" % (a.loss_np, a.loss_zero))
    if a.loss_steps > 0:
        _run_or_reuse(mpirun + ["-np", str(a.loss_np), exe] + model + ["-z", str(a.loss_zero), "-x", str(a.loss_steps),
                                                              "-v", str(a.loss_val_every), "-m", str(a.loss_val_seqs),
                                                              "-s", "0", "-o", loss_dir],
             loss_dir + ".txt", env)
    print("runs: %.0f s; plotting" % (time.time() - t_start), flush=True)
    plot_memory(stdouts, os.path.join(a.out, "memory.png"),
                "Memory per rank (%s): predicted vs allocated vs the ZeRO paper's formula" % a.model)
    plot_traffic(stdouts, os.path.join(a.out, "traffic.png"),
                 "Traffic per rank and optimizer step (%s), beside the ZeRO paper's 2 / 3 Psi" % a.model)
    if a.loss_steps > 0:
        plot_loss([("N=%d, zero_stage %d" % (a.loss_np, a.loss_zero), loss_dir)], os.path.join(a.out, "loss.png"),
                  "Loss of %s, %d ranks, %d steps (val every %d steps over %d sequences)"
                  % (a.model, a.loss_np, a.loss_steps, a.loss_val_every, a.loss_val_seqs))
    if traces:
        plot_timeline(traces, os.path.join(a.out, "timeline.png"))
    else:
        print("note: %s has no --trace yet: no timeline.png" % exe)
    if a.cluster and os.path.exists(a.cluster):
        plot_cluster(a.cluster, os.path.join(a.out, "cluster.png"))
    else:
        print("note: no %s (make cluster-bench, root, about half an hour): no cluster.png" % a.cluster)
    print("done in %.0f s" % (time.time() - t_start))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("loss")
    p.add_argument("-o", default="loss.png")
    p.add_argument("--title")
    p.add_argument("runs", nargs="+")
    for name in ("memory", "traffic"):
        p = sub.add_parser(name)
        p.add_argument("-o", default=name + ".png")
        p.add_argument("--title")
        p.add_argument("stdouts", nargs="+")
    p = sub.add_parser("cluster")
    p.add_argument("-o", default="cluster.png")
    p.add_argument("--title")
    p.add_argument("tsv")
    p = sub.add_parser("timeline")
    p.add_argument("-o", default="timeline.png")
    p.add_argument("--title")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--step", type=int, default=None, help="the step to show (default: the last complete one)")
    p.add_argument("traces", nargs="+")
    p = sub.add_parser("dump")
    p.add_argument("kind", choices=["log", "ledger", "traffic", "header", "cluster", "trace"])
    p.add_argument("file")
    p.add_argument("--rank", type=int, default=0)
    p = sub.add_parser("all")
    p.add_argument("--out", default="docs/img")
    p.add_argument("--work", default="build/plots")
    p.add_argument("--exe", default="./train_gpt_cpu_bf16")
    p.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe")
    p.add_argument("--model", default="-e d2 -b 4 -t 128", help="model and batch per rank (default: make train's)")
    p.add_argument("--np", default="2 4", help="rank counts of the stage comparison; traces at the first")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--trace-flags", default="", help="extra trainer flags with --trace (e.g. the step window)")
    p.add_argument("--loss-steps", type=int, default=60)
    p.add_argument("--loss-np", type=int, default=2)
    p.add_argument("--loss-zero", type=int, default=1)
    p.add_argument("--loss-val-every", type=int, default=10)
    p.add_argument("--loss-val-seqs", type=int, default=16)
    p.add_argument("--cluster", default="build/cluster_bench/results.tsv")
    p.add_argument("--plot-only", action="store_true", help="no runs: plot what an earlier `all` left in --work")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "loss":
            plot_loss([_labelled(r) for r in a.runs], a.o, a.title)
        elif a.cmd == "memory":
            plot_memory(a.stdouts, a.o, a.title)
        elif a.cmd == "traffic":
            plot_traffic(a.stdouts, a.o, a.title)
        elif a.cmd == "cluster":
            plot_cluster(a.tsv, a.o, a.title)
        elif a.cmd == "timeline":
            plot_timeline([_labelled(t) for t in a.traces], a.o, a.rank, a.step, a.title)
        elif a.cmd == "dump":
            if a.kind == "trace":
                info = trace_info(load_trace(a.file), a.file, a.rank)
                res = {k: info[k] for k in ("stage", "num_ranks", "label", "step", "t0", "t1")}
                res["spans"] = {"%s/%s" % k: len(v) for k, v in info["spans"].items()}
                res["memory_categories"] = list(info["mem"][1])
            else:
                text = _read(a.file)
                res = {"log": lambda: parse_main_log(text, a.file), "ledger": lambda: parse_ledger(text, a.file, a.rank),
                       "traffic": lambda: parse_traffic(text, a.file, a.rank), "header": lambda: parse_header(text, a.file),
                       "cluster": lambda: parse_cluster_tsv(text, a.file)}[a.kind]()
            print(json.dumps(res, indent=1, sort_keys=True))
        elif a.cmd == "all":
            cmd_all(a)
        else:
            ap.print_help()
            return 1
    except InputError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pyreq import require
    require("matplotlib")
    sys.exit(main())
