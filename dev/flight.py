#!/usr/bin/env python3
"""flight.py OUT: merge the ranks' flight records and say where they part ways.

After a collective timeout, a signal or an abort each rank of a run with
`-o OUT` writes OUT/flight/rank_R.json (llmc/flight.h: its last K
collectives, --flight-recorder K). This reads them all and prints:

  - which ranks wait in which collective (kind, unit, step, micro-step,
    its call number on its communicator) and for whose data;
  - which ranks' last call on that communicator is earlier (they never
    reached it: they are somewhere else), with what they did last;
  - which ranks left no dump (killed, or their node is lost): every one of
    them, in the verdict too;
  - one verdict line naming the ranks (and nodes) the others wait for.

Only the newest run's dumps are read (every dump carries its run's id and
start, rank 0's): files an earlier run left in the same -o are named as
ignored.

Every rank calls a communicator's collectives in the same order, so equal
call numbers on one communicator are the same collective on every rank.
Standard library only. Exit 0 after the report; 1 with one "error:" line
when OUT holds no readable record.

  python3 dev/flight.py OUT              # or OUT/flight
  python3 dev/flight.py OUT --json       # the same findings as one JSON object
"""

import argparse
import glob
import json
import os
import sys
import time


def fail(msg):
    print("error: flight.py: " + msg, file=sys.stderr)
    sys.exit(1)


def ranks_text(ranks, nodes):
    """'2, 3 (node b), 5 (node c)': ranks grouped by their node, as the trainer writes them."""
    out, last, run = [], None, []
    for r in sorted(ranks):
        n = nodes.get(r, "?")
        if last is not None and n != last:
            out.append(", ".join(map(str, run)) + " (node %s)" % last)
            run = []
        run.append(r)
        last = n
    if run:
        out.append(", ".join(map(str, run)) + " (node %s)" % last)
    word = "ranks" if len(ranks) > 1 else "rank"
    return word + " " + ", ".join(out)


def describe(rec):
    """'all-gather of unit 4, step 3, micro-step 0'"""
    s = rec["kind"]
    if rec.get("unit", -1) >= 0:
        s += " of unit %d" % rec["unit"]
    if rec.get("step", 0) > 0:
        s += ", step %d, micro-step %d" % (rec["step"], rec.get("micro_step", 0))
    return s


def load(path):
    """The newest run's dumps {rank: dump}, and the files ignored [(file, why)].

    Every dump carries its run's id and start (rank 0's, llmc-flight 2); a
    -o reused by a later run (-y 1, often on fewer ranks) can hold dumps of
    several runs: only those of the newest run (the greatest run_start) are
    read. A dump without a run id (llmc-flight 1) counts as an older run."""
    d = path
    if os.path.isdir(os.path.join(path, "flight")):
        d = os.path.join(path, "flight")
    if not os.path.isdir(d):
        fail("%s is not a directory (give the run's -o, which holds flight/rank_R.json)" % path)
    found = []
    for f in sorted(glob.glob(os.path.join(d, "rank_*.json"))):
        try:
            with open(f) as fh:
                x = json.load(fh)
            if x.get("format") not in ("llmc-flight 1", "llmc-flight 2"):
                fail("%s: not a flight record (format %r, expected 'llmc-flight 2')" % (f, x.get("format")))
            int(x["rank"]), int(x["world"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail("%s: cannot read it (%s)" % (f, e))
        found.append((f, x))
    if not found:
        fail("%s holds no flight record (rank_R.json): was the run given -o, and --flight-recorder > 0?" % d)
    runs = {}
    for f, x in found:
        key = (x.get("run_start", float("-inf")), x.get("run", "?"))
        runs.setdefault(key, []).append((f, x))
    newest = max(runs)
    dumps, ignored = {}, []
    for key, fx in sorted(runs.items()):
        for f, x in fx:
            if key == newest:
                dumps[int(x["rank"])] = x
            else:
                ignored.append((f, "run %s of %d rank%s%s, not the newest run %s" % (
                    x.get("run", "without a run id"), x["world"], "s" if x["world"] > 1 else "",
                    (", started %s" % time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(key[0]))) if key[0] > 0 else "",
                    newest[1])))
    return d, dumps, ignored


def analyse(dumps):
    world = max(x["world"] for x in dumps.values())
    nodes = {}
    for x in dumps.values():
        for q, n in enumerate(x.get("nodes") or []):
            nodes.setdefault(q, n)
        nodes[x["rank"]] = x["node"]
    # communicators by (label, ranks): the same on every rank
    def ckey(x, cid):
        for c in x["communicators"]:
            if c["id"] == cid:
                return (c["label"], tuple(c["ranks"]))
        return None
    last_call = {}     # (comm key, rank) -> its latest record on that comm
    waiting = {}       # (comm key, call) -> [(rank, record)]
    latest = {}        # rank -> its latest record (by seq)
    for r, x in dumps.items():
        for rec in x["records"]:
            k = ckey(x, rec["comm"]) if rec["comm"] >= 0 else None
            if rec["state"] != "issued" and (latest.get(r) is None or rec["seq"] > latest[r]["seq"]):
                latest[r] = rec
            if k is None or rec["state"] == "issued":
                continue
            rec = dict(rec, _comm=k, _dump_time=x["time"])
            if (k, r) not in last_call or rec["call"] > last_call[(k, r)]["call"]:
                last_call[(k, r)] = rec
            if rec["state"] == "waiting":
                waiting.setdefault((k, rec["call"]), []).append((r, rec))
    groups = []
    for (k, call), members in waiting.items():
        label, cranks = k
        ranks = sorted(r for r, _ in members)
        rec = members[0][1]
        waited = max(dumps[r]["time"] - m["started"] for r, m in members if m.get("started"))
        known = all(m.get("waiting_for") is not None for _, m in members)
        named, sub = set(), {}
        for r, m in members:
            wf = tuple(m.get("waiting_for") or []) if known else None
            named.update(wf or [])
            sub.setdefault(wf, []).append(r)
        cands = sorted(named) if known else sorted(set(cranks) - set(ranks))
        others = []
        for q in cands:
            if q in ranks:
                others.append((q, "same call", None))
            elif q not in dumps:
                others.append((q, "no dump", None))
            else:
                lq = last_call.get((k, q))
                others.append((q, "behind" if lq is None or lq["call"] < call else "ahead", lq))
        groups.append({"comm": label, "comm_ranks": list(cranks), "call": call, "ranks": ranks, "record": rec,
                       "waited": waited, "known": known, "named": sorted(named), "others": others,
                       "sub": sorted((sorted(v), list(k2) if k2 is not None else None) for k2, v in sub.items())})
    # the first place the ranks part ways: the group most ranks wait in, the earliest call on a tie
    groups.sort(key=lambda g: (-len(g["ranks"]), g["call"]))
    return world, nodes, last_call, latest, groups


def main():
    ap = argparse.ArgumentParser(description="Merge the ranks' flight records (OUT/flight/rank_R.json) and say where they part ways.")
    ap.add_argument("out", help="the run's -o directory (or its flight/ subdirectory)")
    ap.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    a = ap.parse_args()
    d, dumps, ignored = load(a.out)
    world, nodes, last_call, latest, groups = analyse(dumps)
    missing = [q for q in range(world) if q not in dumps]
    lines = []
    reasons = "; ".join("rank %d: %s" % (r, dumps[r]["reason"]) for r in sorted(dumps))
    run = next(iter(dumps.values())).get("run")
    lines.append("flight records in %s: %d of %d ranks%s (%s)" % (d, len(dumps), world, (" of run %s" % run) if run else "", reasons))
    for f, why in ignored:
        lines.append("ignored %s: %s" % (os.path.basename(f), why))
    verdict = []
    if not groups:
        lines.append("no rank was waiting in a collective: every rank's last collective had completed")
        for r in sorted(dumps):
            x = latest.get(r)
            if x:
                lines.append("  rank %d (node %s): last %s, %s" % (r, nodes.get(r, "?"), describe(x), x["state"]))
    seen_behind = set()
    for g in groups:
        rec = g["record"]
        who = ranks_text(g["ranks"], nodes)
        what = "%s (call %d on the %s: %s)" % (describe(rec), g["call"], g["comm"], ranks_text(g["comm_ranks"], nodes))
        if g["known"]:
            for sranks, wf in g["sub"]:
                lines.append("  %s: waiting in %s for %.1f s: no data from %s" % (ranks_text(sranks, nodes), what, g["waited"],
                                                                                  ranks_text(wf, nodes) if wf else "nobody"))
        else:
            lines.append("  %s: waiting in %s for %.1f s (MPI's own collective: whose data is missing is not known; "
                         "see which ranks never reached it)" % (who, what, g["waited"]))
        for q, how, lq in g["others"]:
            if how == "behind" and q not in seen_behind:
                seen_behind.add(q)
                cur = latest.get(q)
                last = ("its last call on the %s is %d: %s (%s)" % (g["comm"], lq["call"], describe(lq), lq["state"])) if lq else \
                       "it has no record on the %s" % g["comm"]
                if cur is not None:
                    ago = dumps[q]["time"] - (cur.get("ended") or cur.get("started") or cur.get("issued") or dumps[q]["time"])
                    last += "; its latest record: %s (%s %.1f s before its dump, reason: %s)" % (describe(cur), cur["state"], ago, dumps[q]["reason"])
                lines.append("  rank %d (node %s): behind: %s" % (q, nodes.get(q, "?"), last))
    for q in missing:
        lines.append("  rank %d (node %s): left no dump" % (q, nodes.get(q, "?")))
    # the verdict, over every waiting record: whom it waits for and where those ranks are
    waiting_ranks = set(r for g in groups for r in g["ranks"])
    nodump, idle, crossed = set(), set(), set()   # crossed: (sender, receiver) whose data was sent and never came
    first = groups[0] if groups else None
    for g in groups:
        for q, how, lq in g["others"]:
            if how == "no dump":
                nodump.add(q)
            elif how == "behind" and q not in waiting_ranks:
                idle.add(q)
        if g["known"]:
            for sranks, wf in g["sub"]:
                for q in wf or []:
                    lq = last_call.get(((g["comm"], tuple(g["comm_ranks"])), q))
                    if q in dumps and lq is not None and lq["call"] >= g["call"]:
                        crossed.update((q, m) for m in sranks)
    if first:
        where = "call %d on the %s (%s)" % (first["call"], first["comm"], describe(first["record"]))
        verdict.append("the ranks part ways at %s, where %s wait%s" % (where, ranks_text(first["ranks"], nodes),
                                                                       "" if len(first["ranks"]) > 1 else "s"))
    # every rank without a dump is named, whether or not a waiting rank still waited for its data
    # (a rank whose data had arrived before it was killed is as gone as the one the others wait for)
    if missing:
        pl = len(missing) > 1
        if nodump and set(nodump) != set(missing):
            came = "the data of %s never came" % ranks_text(sorted(nodump), nodes)
        elif nodump:
            came = "%s data never came" % ("their" if pl else "its")
        else:
            came = "no rank waits for %s data" % ("their" if pl else "its")
        verdict.append("%s left no dump and %s: killed, or %s node is lost (resume on the remaining nodes with -y 1)" % (
            ranks_text(missing, nodes), came, "their" if pl else "its"))
    if idle:
        verdict.append("%s never reached it and wait%s in no collective: %s elsewhere (a hang in computation, I/O or a debugger)" % (
            ranks_text(sorted(idle), nodes), "" if len(idle) > 1 else "s", "they are" if len(idle) > 1 else "it is"))
    cross_nodes = sorted(set(tuple(sorted((nodes.get(q, "?"), nodes.get(m, "?")))) for q, m in crossed if nodes.get(q) != nodes.get(m)))
    if cross_nodes:
        senders = sorted(set(q for q, m in crossed))
        verdict.append("data that %s sent never arrived: nothing crosses between %s (a cut link, or a lost node)" % (
            ranks_text(senders, nodes), "; ".join(" and ".join(p) for p in cross_nodes)))
    elif crossed:
        verdict.append("data that %s sent never arrived" % ranks_text(sorted(set(q for q, m in crossed)), nodes))
    if first and not (nodump or idle or crossed):
        verdict.append("none of the ranks they wait for is behind or silent")
    for v in verdict:
        lines.append("verdict: " + v)
    if a.json:
        print(json.dumps({"dir": d, "run": run, "world": world, "dumped": sorted(dumps), "missing": missing,
                          "ignored": [{"file": f, "why": why} for f, why in ignored],
                          "waiting": [{"ranks": g["ranks"], "comm": g["comm"], "call": g["call"], "kind": g["record"]["kind"],
                                       "unit": g["record"]["unit"], "step": g["record"]["step"], "micro_step": g["record"]["micro_step"],
                                       "waited_s": round(g["waited"], 3), "waiting_for": g["named"] if g["known"] else None,
                                       "behind": sorted(q for q, how, _ in g["others"] if how == "behind"),
                                       "no_dump": sorted(q for q, how, _ in g["others"] if how == "no dump"),
                                       "same_call": sorted(q for q, how, _ in g["others"] if how == "same call")} for g in groups],
                          "verdict": verdict}, indent=1))
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
