#!/usr/bin/python3
"""check_trace.py: validate a trace written by the trainer's --trace.

The format (Chrome trace-event JSON, what Perfetto and chrome://tracing
open; https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):

  {"traceEvents": [...], "displayTimeUnit": "ms",
   "metadata": {"zero_stage": S, "num_ranks": N, ...}}

pid = rank (0..N-1); tid 0 = the compute track, tid 1 = the comm track,
named by "M" events (process_name, thread_name). Duration events are "B"/"E"
pairs ("X" with "dur" is accepted too) with "ts" in microseconds from one
origin. On the compute track "step S" encloses "forward", "backward" and
"optimizer", which enclose one event per unit use ("block 3", "wte chunk 2",
"root", "lm head chunk 2", "embedding", ...) and "wait comm". On the comm
track one event per collective, named by its kind, with "args": {"unit": u,
"bytes": B, "kind": "..."}. Counter events {"ph": "C", "name": "memory",
"args": {category: bytes in use}} follow every change.

Checks (always):
  - the file is valid JSON: an object with a "traceEvents" list, a
    "metadata" object holding integer zero_stage (0..3) and num_ranks >= 1;
  - every event has the fields its phase requires: "ph" of B E X C M i I;
    "name" a string (E may omit it); integer "pid" in 0..num_ranks-1; "tid"
    an integer for B E X; numeric "ts" >= 0 for every phase but M; X a
    numeric "dur" >= 0; C an "args" object of numbers >= 0; M named
    process_name / thread_name / ... with "args": {"name": ...};
  - per (pid, tid): B/E pair up like brackets (an E names what it closes, if
    it has a name), nothing is left open, and start times never decrease
    (E time >= the matching B's); counters per (pid, name) likewise;
  - every (pid, tid) with events has a thread_name, tid 0 "compute" and tid
    1 "comm"; every pid a process_name;
  - every comm-track event has args unit, bytes (integer >= 0) and kind.
Checks (asked for):
  --gathers reshard1   (stage 3, --reshard-after-forward 1) every use of a
                       block, in forward and in backward, has an all-gather
                       of that unit on the same rank's comm track that
                       started after the block's previous use ended and
                       ended before this use ended
  --strict             ... and ended before this use computes: before the
                       use began, or before the last "wait comm" nested in
                       it ended (the trainer's use events open before the
                       unit is fetched, and a fetch that issues the next
                       prefetch can outlast the gather without a wait, so
                       its traces need not pass this)
  --gathers reshard0   every forward use is preceded so, and there is no
                       all-gather of the block between its forward use and
                       its backward use (it was kept)
      Blocks are the compute events whose name matches --block-regex
      (default '^block [0-9]+$'). A comm event's unit is matched to the
      compute event's name through, in order: args "unit" when it is a
      string; metadata "unit_names"[unit]; --unit-names (comma-separated
      names by unit index); args "unit_name"; the compute events on the
      same rank whose args "unit" is the same number.
  --ledger STDOUT      the trainer's stdout of the same run: every memory
                       counter category is a ledger category (names
                       compared without " (transient)"), and its bytes in
                       use never exceed the bytes the ledger allocated for it
                       on that rank (needs --ledger all in the run for ranks
                       other than 0; ranks without a table are skipped); a
                       category the ledger leaves out must stay 0

Prints "trace FILE: OK (...)" or one "error: FILE: <rule>" line per problem
(the first 20), exit 1. As a module: check(obj, ...) returns the list of
problems.
"""
import argparse
import json
import re
import sys

PHASES = {"B", "E", "X", "C", "M", "i", "I"}


def _isint(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _isnum(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def check(obj, gathers=None, block_regex=r"^block [0-9]+$", unit_names=None, ledger=None, tol_us=0.0, strict=False):
    """obj: the parsed JSON. gathers: None, "reshard1" or "reshard0"
    (strict: see --strict).
    unit_names: list of names by unit index (or None). ledger: {rank:
    {category: allocated bytes}} (or None). Returns a list of problems
    (strings); empty = valid."""
    errs = []

    def err(msg):
        errs.append(msg)

    if not isinstance(obj, dict):
        return ["top level is not an object (expected {\"traceEvents\": [...], ...})"]
    evs = obj.get("traceEvents")
    if not isinstance(evs, list):
        return ["no 'traceEvents' list"]
    md = obj.get("metadata")
    nranks = None
    if not isinstance(md, dict):
        err("no 'metadata' object (zero_stage, num_ranks)")
    else:
        if not _isint(md.get("zero_stage")) or not 0 <= md["zero_stage"] <= 3:
            err("metadata.zero_stage must be an integer 0..3, got %r" % (md.get("zero_stage"),))
        if not _isint(md.get("num_ranks")) or md["num_ranks"] < 1:
            err("metadata.num_ranks must be an integer >= 1, got %r" % (md.get("num_ranks"),))
        else:
            nranks = md["num_ranks"]
    if "displayTimeUnit" in obj and obj["displayTimeUnit"] not in ("ms", "ns"):
        err("displayTimeUnit must be 'ms' or 'ns', got %r" % (obj["displayTimeUnit"],))
    if unit_names is None and isinstance(md, dict) and isinstance(md.get("unit_names"), list):
        unit_names = md["unit_names"]

    stacks, last_ts, last_cnt = {}, {}, {}
    pnames, tnames = {}, {}
    used_tracks, used_pids = set(), set()
    spans = {}  # (pid, tid) -> list of {"name", "ts", "end", "args", "parents"}
    for i, ev in enumerate(evs):
        where = "event %d" % i
        if not isinstance(ev, dict):
            err("%s: not an object" % where)
            continue
        ph = ev.get("ph")
        if ph not in PHASES:
            err("%s: ph %r is not one of %s" % (where, ph, " ".join(sorted(PHASES))))
            continue
        name = ev.get("name")
        where = "event %d (%s %r)" % (i, ph, name)
        if not (isinstance(name, str) and name) and ph != "E":
            err("%s: 'name' must be a non-empty string" % where)
            continue
        pid = ev.get("pid")
        if not _isint(pid):
            err("%s: 'pid' must be an integer (the rank)" % where)
            continue
        if nranks is not None and not 0 <= pid < nranks:
            err("%s: pid %d is not a rank 0..%d" % (where, pid, nranks - 1))
        tid = ev.get("tid")
        if ph in ("B", "E", "X") and not _isint(tid):
            err("%s: 'tid' must be an integer (0 compute, 1 comm)" % where)
            continue
        if ph == "M":
            args = ev.get("args")
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                err("%s: metadata event needs \"args\": {\"name\": ...}" % where)
            elif name == "process_name":
                pnames[pid] = args["name"]
            elif name == "thread_name":
                if not _isint(tid):
                    err("%s: thread_name needs an integer 'tid'" % where)
                else:
                    tnames[(pid, tid)] = args["name"]
            continue
        ts = ev.get("ts")
        if not _isnum(ts) or ts < 0:
            err("%s: 'ts' must be a number >= 0 (microseconds), got %r" % (where, ts))
            continue
        used_pids.add(pid)
        if ph == "C":
            args = ev.get("args")
            if not isinstance(args, dict) or not args:
                err("%s: counter needs a non-empty 'args' object" % where)
                continue
            bad = [k for k, v in args.items() if not _isnum(v) or v < 0]
            if bad:
                err("%s: counter values must be numbers >= 0: %s" % (where, ", ".join("%s=%r" % (k, args[k]) for k in bad)))
            key = (pid, name)
            if key in last_cnt and ts < last_cnt[key]:
                err("%s: counter time goes back on pid %d (%s < %s)" % (where, pid, ts, last_cnt[key]))
            last_cnt[key] = ts
            continue
        if ph in ("i", "I"):
            continue
        key = (pid, tid)
        used_tracks.add(key)
        if key in last_ts and ts < last_ts[key]:
            err("%s: time goes back on pid %d tid %d (%s < %s)" % (where, pid, tid, ts, last_ts[key]))
        last_ts[key] = ts
        st = stacks.setdefault(key, [])
        lst = spans.setdefault(key, [])
        if ph == "X":
            dur = ev.get("dur")
            if not _isnum(dur) or dur < 0:
                err("%s: 'X' needs 'dur' >= 0" % where)
                continue
            lst.append({"name": name, "ts": ts, "end": ts + dur, "args": ev.get("args") or {},
                        "parents": [s["name"] for s in st], "i": i})
        elif ph == "B":
            sp = {"name": name, "ts": ts, "end": None, "args": ev.get("args") or {},
                  "parents": [s["name"] for s in st], "i": i}
            st.append(sp)
            lst.append(sp)
        else:
            if not st:
                err("%s: 'E' on pid %d tid %d closes nothing" % (where, pid, tid))
                continue
            sp = st[-1]
            if name is not None and name != sp["name"]:
                err("%s: 'E' named %r closes %r (event %d) on pid %d tid %d" % (where, name, sp["name"], sp["i"], pid, tid))
                continue
            st.pop()
            sp["end"] = ts
            if isinstance(ev.get("args"), dict):
                sp["args"] = dict(sp["args"], **ev["args"])
    for (pid, tid), st in stacks.items():
        for sp in st:
            err("event %d ('B' %r) on pid %d tid %d is never closed" % (sp["i"], sp["name"], pid, tid))
    for pid in sorted(used_pids):
        if pid not in pnames:
            err("pid %d has no process_name metadata event" % pid)
    want = {0: "compute", 1: "comm"}
    for key in sorted(used_tracks):
        if key not in tnames:
            err("pid %d tid %d has no thread_name metadata event" % key)
        elif key[1] in want and tnames[key] != want[key[1]]:
            err("pid %d tid %d is named %r, expected %r" % (key[0], key[1], tnames[key], want[key[1]]))
    for (pid, tid), lst in spans.items():
        if tid != 1:
            continue
        for sp in lst:
            a = sp["args"]
            miss = [k for k in ("unit", "bytes", "kind") if k not in a]
            if miss:
                err("event %d (comm %r on pid %d): args lack %s" % (sp["i"], sp["name"], pid, ", ".join(miss)))
            elif not _isint(a["bytes"]) or a["bytes"] < 0:
                err("event %d (comm %r on pid %d): args.bytes must be an integer >= 0, got %r"
                    % (sp["i"], sp["name"], pid, a["bytes"]))
    if errs:
        return errs

    if ledger is not None:
        cats = {}
        for ev in evs:
            if ev.get("ph") == "C" and ev.get("name") == "memory":
                for k, v in ev["args"].items():
                    key = (ev["pid"], k)
                    cats[key] = max(cats.get(key, 0), v)
        for (pid, k), mx in sorted(cats.items()):
            if pid not in ledger:
                continue
            alloc = {_ckey(c): b for c, b in ledger[pid].items()}
            if _ckey(k) not in alloc and mx == 0:
                continue  # the ledger leaves out categories this run does not have (master weights in fp32)
            if _ckey(k) not in alloc:
                err("memory counter %r of rank %d is not a ledger category (%s)" % (k, pid, ", ".join(ledger[pid])))
            elif mx > alloc[_ckey(k)]:
                err("memory counter %r of rank %d reaches %d bytes, more than the %d the ledger allocated"
                    % (k, pid, mx, alloc[_ckey(k)]))

    if gathers is not None:
        errs += _check_gathers(spans, gathers, block_regex, unit_names, tol_us, strict)
    return errs


def _ckey(name):
    return re.sub(r"\s*\(transient\)\s*$", "", name).strip()


def _unit_names_of(sp, unit_names, by_compute):
    """The names a comm event's unit may go by: args "unit" when a string;
    unit_names[unit] (metadata or --unit-names); args "unit_name"; else the
    names of the compute events that carry the same args "unit" on that
    rank (a unit such as a wte chunk has several: embedding, LM head)."""
    a = sp["args"]
    u = a.get("unit")
    if isinstance(u, str):
        return {u}
    if _isint(u) and unit_names is not None and 0 <= u < len(unit_names):
        return {unit_names[u]}
    if isinstance(a.get("unit_name"), str):
        return {a["unit_name"]}
    if _isint(u) and u in by_compute:
        return by_compute[u]
    return None


def _check_gathers(spans, mode, block_regex, unit_names, tol, strict=False):
    """A use of a block = a compute event matching block_regex inside
    "forward" or "backward". Its gather must have started after the block's
    previous use ended and ended before the use ends. strict: it must have
    ended before the use computes: before the use begins, or, when waits on
    communication ("wait comm") are nested in the use, before the last of
    them ends. (A use event may open before its compute does: the trainer's
    begins before it fetches the unit's parameters, which issues the next
    prefetch, so a gather that ends during that fetch needs no wait.)"""
    errs = []
    rx = re.compile(block_regex)
    pids = sorted(set(k[0] for k in spans))
    nblock_uses = 0
    for pid in pids:
        allc = spans.get((pid, 0), [])
        by_compute = {}
        for s in allc:
            u = s["args"].get("unit")
            if _isint(u):
                by_compute.setdefault(u, set()).add(s["name"])
        waits = [s for s in allc if s["name"] == "wait comm" and s["end"] is not None]
        comp = [s for s in allc if rx.search(s["name"])]
        ag = []
        for s in spans.get((pid, 1), []):
            kind = s["args"].get("kind", s["name"])
            if kind not in ("all-gather", "secondary all-gather (hpZ)"):   # hpZ: a unit's later gathers come from the node's secondary shard
                continue
            un = _unit_names_of(s, unit_names, by_compute)
            if un is None:
                errs.append("rank %d: all-gather at ts %s: cannot tell its unit's name (args.unit %r; give metadata "
                            "unit_names or --unit-names)" % (pid, s["ts"], s["args"].get("unit")))
                return errs
            ag.append((un, s))
        # uses of each block in time order, with the phase they run in
        uses = {}
        for s in sorted(comp, key=lambda s: s["ts"]):
            ph = "forward" if "forward" in s["parents"] else "backward" if "backward" in s["parents"] else None
            if ph is None:
                continue
            uses.setdefault(s["name"], []).append((ph, s))
        if not uses:
            errs.append("rank %d: no block uses (names matching %r) inside forward or backward" % (pid, block_regex))
            continue
        for name, lst in sorted(uses.items()):
            prev_end = float("-inf")
            prev_ph = None
            for ph, s in lst:
                nblock_uses += 1
                ready_by = max([s["ts"]] + [w["end"] for w in waits if w["ts"] >= s["ts"] and w["end"] <= s["end"]])
                mine = [g for un, g in ag if name in un and g["ts"] >= prev_end - tol and g["ts"] <= s["end"] + tol]
                before = [g for g in mine if g["end"] is not None and g["end"] <= (ready_by if strict else s["end"]) + tol]
                want = mode == "reshard1" or ph == "forward" or prev_ph != "forward"
                if want and not before:
                    if mine and strict:
                        errs.append("rank %d: %s in %s at ts %s computes (ts %s) before its all-gather ends (ts %s)"
                                    % (pid, name, ph, s["ts"], ready_by, mine[0]["end"]))
                    elif mine:
                        errs.append("rank %d: %s in %s at ts %s..%s ends before its all-gather does (ts %s)"
                                    % (pid, name, ph, s["ts"], s["end"], mine[0]["end"]))
                    else:
                        errs.append("rank %d: %s in %s at ts %s: no all-gather of it since its previous use"
                                    % (pid, name, ph, s["ts"]))
                if mode == "reshard0" and ph == "backward" and prev_ph == "forward" and mine:
                    errs.append("rank %d: %s in backward at ts %s: all-gathered again (ts %s) though "
                                "--reshard-after-forward 0 keeps it from forward" % (pid, name, s["ts"], mine[0]["ts"]))
                prev_end, prev_ph = s["end"], ph
    if not errs and nblock_uses == 0:
        errs.append("no block uses found to check")
    return errs


def read_ledger(path):
    """{rank: {category: allocated bytes}} from a trainer's stdout (every
    'memory ledger, rank R of N' table in it)."""
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plot
    text = open(path, errors="replace").read()
    out = {}
    for m in re.finditer(r"^memory ledger, rank (\d+) of", text, re.M):
        r = int(m.group(1))
        led = plot.parse_ledger(text, path, r)
        out[r] = {row["category"]: row["values"].get("allocated B", 0) for row in led["rows"]}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("trace")
    ap.add_argument("--gathers", choices=["reshard1", "reshard0"])
    ap.add_argument("--block-regex", default=r"^block [0-9]+$")
    ap.add_argument("--unit-names", help="comma-separated unit names by unit index")
    ap.add_argument("--ledger", help="the trainer's stdout of the same run")
    ap.add_argument("--strict", action="store_true", help="a use's gather ends before the use computes")
    ap.add_argument("--tolerance-us", type=float, default=0.0,
                    help="slack when comparing a gather's end with a use's start (default 0)")
    a = ap.parse_args(argv)
    try:
        with open(a.trace) as f:
            text = f.read()
    except OSError as e:
        print("error: %s: cannot read (%s)" % (a.trace, e.strerror))
        return 1
    try:
        obj = json.loads(text)
    except ValueError as e:
        print("error: %s: not valid JSON (%s)" % (a.trace, e))
        return 1
    ledger = None
    if a.ledger:
        try:
            ledger = read_ledger(a.ledger)
        except Exception as e:  # plot.InputError or OSError: one line
            print("error: %s: %s" % (a.ledger, e))
            return 1
    names = a.unit_names.split(",") if a.unit_names else None
    errs = check(obj, a.gathers, a.block_regex, names, ledger, a.tolerance_us, a.strict)
    if errs:
        for e in errs[:20]:
            print("error: %s: %s" % (a.trace, e))
        if len(errs) > 20:
            print("error: %s: ... %d more problems" % (a.trace, len(errs) - 20))
        return 1
    evs = obj["traceEvents"]
    md = obj["metadata"]
    print("trace %s: OK (%d events, %d ranks, zero_stage %d%s%s)" % (
        a.trace, len(evs), md["num_ranks"], md["zero_stage"],
        ", gathers %s%s" % (a.gathers, " strict" if a.strict else "") if a.gathers else "", ", memory within the ledger" if ledger else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
