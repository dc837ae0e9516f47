#!/usr/bin/env bash
# test_plots.sh: the pictures (dev/plot.py) and the trace validator
# (dev/check_trace.py).
#  1. Parsers return the numbers in the text: on tiny real runs (stage 3 and
#     stage 0 on 2 ranks, stage 1 on 3 ranks: padded shards), the ledger's
#     params row equals p*Psi/N (predicted and allocated: p x the printed
#     shard size; paper formula: p*Psi/N rounded) and the rows add up to the
#     printed total; the traffic table's reduce-scatter hands steps x g x
#     padded Psi bytes and its ring wire bytes are (N-1)/N of that; the stage-3
#     unit classes add up to the all-gather's Psi/step; main.log's losses
#     equal what the run printed on stdout.
#  2. Every subcommand writes a PNG of the expected pixel size (figure size
#     x 100 dpi) and more than 10 KB: loss (2 runs), memory and traffic
#     (3 runs, 2 rank counts), cluster (a results.tsv in
#     dev/cluster_bench.sh's columns), timeline (synthetic traces, and the
#     trainer's own trace when it has --trace).
#  3. Bad input: one "error: FILE: ..." line, exit 1, no PNG.
#  4. check_trace.py accepts synthetic traces of stages 0-3 that follow the
#     format, and the gather rules (reshard 1: an all-gather before each
#     block's forward and backward; reshard 0: none before backward); it
#     rejects traces broken in one way each, with the rule named.
# Last line: "N passed, M failed"; about 20 s on 2 cores.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ -x ./train_gpt_cpu ] || { echo "FAIL ./train_gpt_cpu not built (make train_gpt_cpu)"; echo "0 passed, 1 failed"; exit 1; }
TINY="-e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -b 2 -x 3 -s 0"
HAS_TRACE=0
./train_gpt_cpu -h 2>&1 | grep -q -- '--trace' && HAS_TRACE=1

run() { # name np args...
  local name=$1 np=$2; shift 2
  if timeout 120 $MPIRUN -np "$np" ./train_gpt_cpu $TINY "$@" > "$tmp/$name.txt" 2>&1; then ok "tiny run $name"
  else bad "tiny run $name: exit $?"; tail -5 "$tmp/$name.txt"; fi
}
tr() { [ $HAS_TRACE = 1 ] && echo "--trace $tmp/$1.json"; }
run n2z3 2 -z 3 -v 1 -m 1 -o "$tmp/n2z3" $(tr n2z3)
run n2z0 2 -z 0 -v 3 -m 1 -o "$tmp/n2z0" $(tr n2z0)
run n3z1 3 -z 1 -v 0
[ $HAS_TRACE = 1 ] && run n2z3r0 2 -z 3 --reshard-after-forward 0 -v 0 $(tr n2z3r0)

HAS_TRACE=$HAS_TRACE $PY - "$tmp" "$pass" "$fail" <<'PY'
import copy, json, os, re, struct, subprocess, sys
tmp, npass, nfail = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, "dev")
import plot, check_trace
PY_EXE = "/usr/bin/python3"

def ok(msg):
    global npass; npass += 1; print("ok   " + msg)

def bad(msg):
    global nfail; nfail += 1; print("FAIL " + msg)

def check(cond, msg):
    (ok if cond else bad)(msg)

def guarded(name, f):
    try:
        f()
    except Exception as e:  # a parser that throws is a failed check, not a crashed suite
        bad("%s: %s: %s" % (name, type(e).__name__, e))

T = lambda n: os.path.join(tmp, n)
txt = lambda n: open(T(n + ".txt")).read()

# ---- 1. parsers vs the numbers in the text
def t_ledger():
    for name in ("n2z3", "n2z0", "n3z1"):
        s = txt(name)
        h = plot.parse_header(s, name)
        L = plot.parse_ledger(s, name)
        N, p, psi = L["num_ranks"], L["p"], L["psi"]
        row = {r["category"]: r["values"] for r in L["rows"]}
        pr = row["params"]
        if h["zero_stage"] == 3:  # 2 ranks divide this Psi: no padding
            check(pr["predicted B"] == pr["allocated B"] == pr["paper formula B"] == p * L["per_shard"] == p * psi // N,
                  "%s: params row = p*Psi/N = %d (%s)" % (name, p * psi // N, pr))
        else:  # the full (padded) buffer; the paper counts Psi
            check(pr["predicted B"] == pr["allocated B"] == p * L["padded"] and pr["paper formula B"] == p * psi,
                  "%s: params row = p x padded Psi = %d, paper p*Psi = %d (%s)" % (name, p * L["padded"], p * psi, pr))
        div = N if h["zero_stage"] >= 1 else 1
        check(row["adam m"]["paper formula B"] == round(4 * psi / div),
              "%s: adam m paper formula = round(4*Psi/%d) = %d (got %s)" % (name, div, round(4 * psi / div),
                                                                             row["adam m"]["paper formula B"]))
        if h["zero_stage"] >= 1:
            check(row["adam m"]["allocated B"] == 4 * L["per_shard"],
                  "%s: adam m allocated = 4 x the printed shard size %d" % (name, L["per_shard"]))
        tot = L["sums"]["= total"]["values"]
        check(sum(v["allocated B"] for v in row.values()) == tot["allocated B"] and
              sum(v["predicted B"] for v in row.values()) == tot["predicted B"],
              "%s: %d ledger rows add up to the printed total %d" % (name, len(row), tot["allocated B"]))
        check(L["ok"] is True and (h["num_ranks"], h["zero_stage"]) == (N, L["zero_stage"]),
              "%s: header and ledger agree: N=%d stage %d, ledger OK" % (name, N, L["zero_stage"]))
        check(L["peak_mb"] is not None and 0 < L["peak_mb"] <= tot["allocated B"] / 1e6 + 0.05,
              "%s: 'peak:' line read: %s MB, at most the ledger total %.1f MB" % (name, L["peak_mb"], tot["allocated B"] / 1e6))
    n3 = plot.parse_ledger(txt("n3z1"), "n3z1")
    check(n3["padded"] > n3["psi"] and n3["per_shard"] * 3 == n3["padded"],
          "n3z1: 3 ranks pad Psi %d to %d = 3 x %d" % (n3["psi"], n3["padded"], n3["per_shard"]))
guarded("ledger", t_ledger)

def t_ledger_parts():
    # the layout of a ledger whose transients are broken down by unit class
    # (rows indented deeper) and that holds a line of text: parts are not
    # categories, the text is kept as a note
    s = """memory ledger, rank 0 of 2, zero_stage 3: Psi = 3323648 parameters (3323648 padded, 1661824 per shard), p=4 g=4 k=8 bytes/param
  category                          predicted B      allocated B  paper formula B  
  params                                6647296          6647296          6647296  p Psi/N
  = model states                        6647296          6647296          6647296  (p+g+k) Psi/N = 16 Psi/N (8.00 bytes/param of Psi)
  gathered units (transient)            4096512          4096512 
    root (wpe, lnf)                       16896                   1 x 4224 elements (its largest unit)
    wte chunks                          3679744                   2 x 459968 elements (its largest unit)
    blocks                               399872                   2 x 49984 elements (its largest unit)
  = total                              10743808         10743808
  live at the peak: every buffer above
  ledger: OK (allocated == predicted in every category)
"""
    L = plot.parse_ledger(s, "sample")
    g = L["rows"][1]
    check([r["category"] for r in L["rows"]] == ["params", "gathered units (transient)"] and
          [(p["name"], p["values"]) for p in g["parts"]] == [("root (wpe, lnf)", {"predicted B": 16896}),
                                                              ("wte chunks", {"predicted B": 3679744}),
                                                              ("blocks", {"predicted B": 399872})] and
          L["sums"]["= model states"]["values"]["paper formula B"] == 6647296 and
          L["notes"] == ["live at the peak: every buffer above"],
          "ledger with parts by unit class: 2 categories, 3 parts of the gathered units, a note line")
guarded("ledger parts", t_ledger_parts)

def t_traffic():
    for name in ("n2z3", "n2z0", "n3z1"):
        s = txt(name)
        L, t = plot.parse_ledger(s, name), plot.parse_traffic(s, name)
        rows = {r["collective"]: r["values"] for r in t["rows"]}
        rs, N = rows["reduce-scatter"], t["num_ranks"]
        check(t["steps"] == 3 and rs["handed B"] == rs["predicted B"] == 3 * L["g"] * L["padded"],
              "%s: reduce-scatter hands steps x g x padded Psi = %d bytes" % (name, 3 * L["g"] * L["padded"]))
        check(all(v["ring wire B"] * N == v["handed B"] * (N - 1) for k, v in rows.items() if k in ("reduce-scatter", "all-gather")),
              "%s: ring wire bytes = (N-1)/N x handed for reduce-scatter and all-gather" % name)
        check(abs(sum(v["Psi/step"] for v in rows.values()) - t["volume_psi"]) <= 0.0025 and t["ok"] is True,
              "%s: Psi/step column adds up to the printed volume %.3f Psi" % (name, t["volume_psi"]))
        if t["zero_stage"] == 3:
            cs = t["classes"]
            check(len(cs) >= 2 and abs(sum(c["psi"] for c in cs) - rows["all-gather"]["Psi/step"]) <= 0.0025,
                  "%s: unit classes %s add up to the all-gather's %.3f Psi/step"
                  % (name, ", ".join("%s %.3f" % (c["name"], c["psi"]) for c in cs), rows["all-gather"]["Psi/step"]))
guarded("traffic", t_traffic)

def t_log():
    s = txt("n2z3")
    log = plot.parse_main_log(open(T("n2z3/main.log")).read(), "main.log")
    printed = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step\s+(\d+)/\d+ \| loss ([0-9.]+)", s, re.M)}
    pval = {int(m.group(2)): float(m.group(1)) for m in re.finditer(r"^val loss ([0-9.]+) at step (\d+)", s, re.M)}
    check(sorted(log["train"]) == [1, 2, 3] and all(log["train"][k]["train_loss"] == printed[k] for k in printed),
          "main.log: train losses %s equal stdout's" % [log["train"][k]["train_loss"] for k in sorted(log["train"])])
    check(log["val"] == pval and sorted(pval) == [0, 1, 2, 3], "main.log: val losses at steps 0-3 equal stdout's %s" % pval)
guarded("main.log", t_log)

# ---- synthetic traces in the format check_trace.py documents
def make_trace(stage, n=2, reshard=1, L=3, K=2, steps=2, unit_in_metadata=True, nowait=False):
    """ranks x steps of a model with a root, K wte chunks and L blocks: compute
    and comm tracks simulated with fixed durations (stage 3: prefetch one use
    ahead in forward), memory counters following the buffers. nowait: in
    backward, compute starts 1 us after its gather starts instead of waiting
    for its end (a broken engine)."""
    names = ["root"] + ["wte chunk %d" % k for k in range(K)] + ["block %d" % l for l in range(L)]
    ub = lambda u: 30000 if names[u].startswith("block") else 50000 if names[u].startswith("wte") else 4000
    psi_b = sum(ub(u) for u in range(len(names)))
    evs = []
    for r in range(n):
        evs.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": "rank %d" % r}})
        evs.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}})
        evs.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 1, "args": {"name": "comm"}})
    for r in range(n):
        comp, comm, mem = [], [], []
        st = {"params": psi_b // (n if stage >= 3 else 1), "grads": psi_b // (n if stage >= 2 else 1),
              "adam m": psi_b // (n if stage >= 1 else 1), "adam v": psi_b // (n if stage >= 1 else 1),
              "activations": 80000, "gathered units (transient)": 0, "unit grads (transient)": 0}
        now, cfree, started = [10.0 + r], [0.0], [0.0]
        def setmem(t, k, v): mem.append((t, len(mem), k, v))
        def issue(kind, u, dur):
            s = max(now[0], cfree[0]); cfree[0] = s + dur; started[0] = s
            comm.append({"ph": "B", "name": kind, "pid": r, "tid": 1, "ts": s,
                         "args": {"unit": u if unit_in_metadata else names[u], "bytes": ub(u), "kind": kind}})
            comm.append({"ph": "E", "name": kind, "pid": r, "tid": 1, "ts": s + dur})
            return s + dur
        def span(name, dur, ready=None):
            if ready is not None and ready > now[0]:
                comp.append({"ph": "B", "name": "wait comm", "pid": r, "tid": 0, "ts": now[0]}); now[0] = ready
                comp.append({"ph": "E", "name": "wait comm", "pid": r, "tid": 0, "ts": now[0]})
            comp.append({"ph": "B", "name": name, "pid": r, "tid": 0, "ts": now[0]}); now[0] += dur
            comp.append({"ph": "E", "name": name, "pid": r, "tid": 0, "ts": now[0]})
        def B(name): comp.append({"ph": "B", "name": name, "pid": r, "tid": 0, "ts": now[0]})
        def E(name): comp.append({"ph": "E", "name": name, "pid": r, "tid": 0, "ts": now[0]})
        blocks, chunks = list(range(K + 1, K + 1 + L)), list(range(1, K + 1))
        t_first = now[0]
        for s in range(1, steps + 1):
            B("step %d" % s); B("forward")
            # forward uses: root, embedding (wte chunk 0), blocks, lm head chunks
            fw = [(0, "root", 3.0), (1, "embedding", 6.0)] + [(u, names[u], 20.0) for u in blocks] + \
                 [(u, "lm head chunk %d" % (u - 1), 12.0) for u in chunks]
            ready = {}
            if stage == 3:
                ready[0] = issue("all-gather", 0, 5.0); setmem(now[0], "gathered units (transient)", ub(0))
            for i, (u, nm, dur) in enumerate(fw):
                if stage == 3 and i + 1 < len(fw):  # prefetch the next use
                    ready[i + 1] = issue("all-gather", fw[i + 1][0], 8.0)
                    setmem(now[0], "gathered units (transient)", ub(fw[i + 1][0]))
                span(nm, dur, ready.get(i) if stage == 3 else None)
                if stage == 3 and u != 0 and (reshard or u not in blocks):
                    setmem(now[0], "gathered units (transient)", -ub(u))
            E("forward"); B("backward")
            bw = [(u, "lm head chunk %d" % (u - 1), 24.0) for u in reversed(chunks)] + \
                 [(u, names[u], 40.0) for u in reversed(blocks)] + [(1, "embedding", 6.0)]
            for u, nm, dur in bw:
                rd = None
                if stage == 3 and (reshard or u not in blocks):
                    rd = issue("all-gather", u, 8.0); setmem(now[0], "gathered units (transient)", ub(u))
                if stage >= 2:
                    setmem(now[0], "unit grads (transient)", ub(u))
                if nowait and rd is not None:
                    now[0] = max(now[0], started[0] + 1.0); rd = None
                span(nm, dur, rd)
                if stage == 3:
                    setmem(now[0], "gathered units (transient)", -ub(u))
                if stage >= 2:
                    setmem(issue("reduce-scatter", u, 6.0), "unit grads (transient)", -ub(u))
            if stage < 2:
                for u in range(len(names)):
                    issue("reduce-scatter", u, 6.0)
            if stage == 0:
                for u in range(len(names)):
                    issue("all-gather", u, 6.0)
            if cfree[0] > now[0]:
                span("wait comm", cfree[0] - now[0])
            E("backward")
            span("optimizer", 15.0)
            if stage in (1, 2):
                for u in range(len(names)):
                    issue("all-gather", u, 6.0)
                span("wait comm", cfree[0] - now[0])
            if stage == 3:
                setmem(now[0], "gathered units (transient)", -ub(0))
            E("step %d" % s)
            now[0] += 3
        cnt = [{"ph": "C", "name": "memory", "pid": r, "ts": t_first, "args": dict(st)}]
        for t, _, k, v in sorted(mem):
            st[k] += v
            cnt.append({"ph": "C", "name": "memory", "pid": r, "ts": t, "args": dict(st)})
        evs += comp + comm + cnt
    md = {"zero_stage": stage, "num_ranks": n, "reshard_after_forward": reshard}
    if unit_in_metadata:
        md["unit_names"] = names
    return {"traceEvents": evs, "displayTimeUnit": "ms", "metadata": md}

def dump(obj, name):
    p = T(name)
    with open(p, "w") as f:
        json.dump(obj, f)
    return p

good = {"z0": make_trace(0), "z1": make_trace(1), "z2": make_trace(2), "z3": make_trace(3), "z3r0": make_trace(3, reshard=0)}
gpath = {k: dump(v, "syn_%s.json" % k) for k, v in good.items()}

# ---- 2. every picture, with its pixel size
def png_size(p):
    with open(p, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])

def plot_cmd(args, out, want_wh, what):
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([PY_EXE, "dev/plot.py"] + args + ["-o", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0 or not os.path.exists(out):
        bad("%s: exit %d: %s" % (what, r.returncode, r.stdout.strip()[-300:]))
        return
    wh, sz = png_size(out), os.path.getsize(out)
    check(wh == want_wh and sz > 10000, "%s: PNG %dx%d (want %dx%d), %d bytes" % (what, wh[0], wh[1], want_wh[0], want_wh[1], sz))

plot_cmd(["loss", "stage 3=" + T("n2z3"), "stage 0=" + T("n2z0/main.log")], T("loss.png"), (800, 450), "plot loss (2 runs)")
runs = [T("n2z0.txt"), T("n2z3.txt"), T("n3z1.txt")]
plot_cmd(["memory"] + runs, T("memory.png"), (1100, 525), "plot memory (N=2: z0 z3, N=3: z1)")
plot_cmd(["traffic"] + runs, T("traffic.png"), (1200, 475), "plot traffic (N=2: z0 z3, N=3: z1)")
tsv = T("results.tsv")
with open(tsv, "w") as f:
    f.write("layout\tconfig\trate\tms_per_step\tlink_MB_per_step\tmax_node_MB_per_step\t"
            "trainer_ring_wire_B_MB_per_rank_step\tcompute_ms\tpredicted_ms\n")
    for lay in ("2x2", "2x1"):
        for cfg, mb in (("z0", 120.0), ("z3", 170.0), ("z3 reshard 0", 130.0)):
            f.write("%s\t%s\tnone\t900.0\t%.3f\t%.3f\t%.3f\t900.0\t-\n" % (lay, cfg, mb, mb / 2, mb))
            for rate, bps in (("100mbit", 1e8), ("1gbit", 1e9), ("10gbit", 1e10)):
                pred = 900.0 + mb * 8e6 / bps * 1000
                f.write("%s\t%s\t%s\t%.1f\t%.3f\t%.3f\t%.3f\t900.0\t%.1f\n" % (lay, cfg, rate, pred * 1.1, mb, mb / 2, mb, pred))
rows = plot.parse_cluster_tsv(open(tsv).read(), tsv)
check(len(rows) == 24 and rows[1]["rate_bps"] == 1e8 and rows[0]["rate_bps"] is None and rows[0]["predicted_ms"] is None
      and rows[1]["predicted_ms"] == 10500.0, "cluster results.tsv parsed: 24 rows, rates in bit/s, '-' = none")
plot_cmd(["cluster", tsv], T("cluster.png"), (950, 450), "plot cluster (2 layouts x 3 configs x 4 rates)")
plot_cmd(["timeline"] + [gpath[k] for k in ("z0", "z1", "z2", "z3", "z3r0")], T("timeline.png"), (1000, 1625),
         "plot timeline (synthetic traces, 5 configurations)")
info = plot.trace_info(good["z3"], "z3", 0, None)
gi = info["mem"][1]["gathered units (transient)"]
check(info["step"] == 2 and max(gi) == 4000 + 2 * 50000 and min(gi) == 0 and len(gi) == 1 + 2 * (1 + 6 + 6 + 6 * 4 + 1),
      "timeline parser: last step 2, %d memory points, gathered units peak %d = root + 2 wte chunks (prefetch)"
      % (len(gi), max(gi)))

if os.environ.get("HAS_TRACE") == "1":
    for name, g in (("n2z3", ["--gathers", "reshard1"]), ("n2z3r0", ["--gathers", "reshard0"]), ("n2z0", [])):
        p = T(name + ".json")
        r = subprocess.run([PY_EXE, "dev/check_trace.py", p, "--ledger", T(name + ".txt")] + g,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        check(r.returncode == 0, "trainer's trace %s passes check_trace.py --ledger %s: %s"
              % (name, " ".join(g), r.stdout.strip()[-300:]))
    plot_cmd(["timeline", T("n2z0.json"), T("n2z3.json"), T("n2z3r0.json")], T("timeline_real.png"), (1000, 1025),
             "plot timeline of the trainer's traces (z0, z3, z3 reshard 0)")
else:
    print("note: ./train_gpt_cpu has no --trace yet: the trainer's own trace is not checked here")

# ---- 3. bad input: one line, exit 1, no PNG
def bad_input(args, want, what):
    out = T("bad.png")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([PY_EXE, "dev/plot.py"] + args + ["-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and want in lines[0]
          and not os.path.exists(out), "%s: %s" % (what, lines[:2]))
with open(T("garbage.log"), "w") as f:
    f.write("step 1 train_loss 10.5 lr 1e-4\nhello world\n")
bad_input(["loss", T("garbage.log")], "line 2", "loss on a bad main.log")
bad_input(["memory", T("garbage.log")], "no 'train_gpt", "memory on a file that is not a trainer's stdout")
bad_input(["loss", T("missing")], "cannot read", "loss on a missing file")
head = txt("n2z0").split("traffic, rank")[0]
with open(T("cut.txt"), "w") as f:
    f.write(head)
bad_input(["traffic", T("cut.txt")], "no 'traffic, rank 0", "traffic on a run that did not finish")
bad_input(["timeline", T("garbage.log")], "not valid JSON", "timeline on a file that is not JSON")

# ---- 4. check_trace.py: valid traces pass, broken ones fail with the rule
def ct(obj_or_text, args, name):
    p = T(name)
    with open(p, "w") as f:
        f.write(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text))
    r = subprocess.run([PY_EXE, "dev/check_trace.py", p] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    return r.returncode, r.stdout

for k in ("z0", "z1", "z2", "z3", "z3r0"):
    rc, o = ct(good[k], [], "v_%s.json" % k)
    check(rc == 0 and "OK" in o, "check_trace: synthetic %s trace is valid (%s)" % (k, o.strip()))
rc, o = ct(good["z3"], ["--gathers", "reshard1"], "v1.json")
check(rc == 0, "check_trace: stage 3 reshard 1: an all-gather before each block's forward and backward (%s)" % o.strip())
rc, o = ct(good["z3r0"], ["--gathers", "reshard0"], "v2.json")
check(rc == 0, "check_trace: stage 3 reshard 0: gathered before forward, none before backward (%s)" % o.strip())
names_only = make_trace(3, unit_in_metadata=False)
rc, o = ct(names_only, ["--gathers", "reshard1"], "v3.json")
check(rc == 0, "check_trace: units named in args.unit (strings) work too")
no_names = copy.deepcopy(good["z3"]); del no_names["metadata"]["unit_names"]
rc, o = ct(no_names, ["--gathers", "reshard1"], "v4.json")
check(rc == 1 and "cannot tell its unit's name" in o, "check_trace: integer units without names: asks for them")
rc, o = ct(no_names, ["--gathers", "reshard1", "--unit-names", ",".join(good["z3"]["metadata"]["unit_names"])], "v5.json")
check(rc == 0, "check_trace: --unit-names maps integer units")

def first(obj, pred):
    return next(i for i, e in enumerate(obj["traceEvents"]) if pred(e))

def broken(name, mutate, want, args=(), base="z3"):
    obj = copy.deepcopy(good[base])
    obj = mutate(obj) or obj
    rc, o = ct(obj, list(args), "b_%s.json" % re.sub(r"\W+", "_", name))
    check(rc == 1 and want in o and all(l.startswith("error: ") for l in o.strip().splitlines()),
          "check_trace rejects %s: %s" % (name, (o.strip().splitlines() or ["(nothing)"])[0][-150:]))

rc, o = ct(json.dumps(good["z0"])[:-20], [], "b_trunc.json")
check(rc == 1 and "not valid JSON" in o, "check_trace rejects a truncated file: %s" % o.strip()[-100:])
def drop_ts(o): del o["traceEvents"][first(o, lambda e: e["ph"] == "B")]["ts"]
broken("an event without ts", drop_ts, "'ts' must be a number")
def drop_end(o): del o["traceEvents"][first(o, lambda e: e["ph"] == "E" and e["name"] == "forward")]
broken("a B without its E", drop_end, "never closed")
def rename_end(o): o["traceEvents"][first(o, lambda e: e["ph"] == "E" and e["name"] == "block 1")]["name"] = "block 2"
broken("an E that closes another event", rename_end, "closes 'block 1'")
def back(o):
    i = first(o, lambda e: e["ph"] == "B" and e["name"] == "block 2" and e["pid"] == 1)
    o["traceEvents"][i]["ts"] -= 50.0
broken("a timestamp that goes back on a track", back, "time goes back on pid 1 tid 0")
def nobytes(o): del o["traceEvents"][first(o, lambda e: e.get("tid") == 1 and e["ph"] == "B")]["args"]["bytes"]
broken("a collective without args.bytes", nobytes, "args lack bytes")
def nothread(o): del o["traceEvents"][first(o, lambda e: e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == 1)]
broken("a track without thread_name", nothread, "pid 0 tid 1 has no thread_name")
def nomd(o): del o["metadata"]["num_ranks"]
broken("metadata without num_ranks", nomd, "metadata.num_ranks")
def negcnt(o): o["traceEvents"][first(o, lambda e: e["ph"] == "C")]["args"]["activations"] = -1
broken("a negative memory counter", negcnt, "counter values must be numbers >= 0")
def badpid(o): o["traceEvents"][first(o, lambda e: e["ph"] == "C")]["pid"] = 7
broken("a pid that is not a rank", badpid, "pid 7 is not a rank 0..1")
def nogather(o):
    evs = o["traceEvents"]
    # the all-gather of block 1 (unit 4) before its backward on rank 0: drop its B and E
    bw = [i for i, e in enumerate(evs) if e.get("tid") == 1 and e["pid"] == 0 and e["ph"] == "B"
          and e["args"]["kind"] == "all-gather" and e["args"]["unit"] == 4]
    i = bw[1]  # uses of block 1: forward (0), backward (1)
    del evs[i:i + 2]
broken("a block's backward without its all-gather (reshard 1)", nogather,
       "block 1 in backward at ts", ["--gathers", "reshard1"])
broken("a reshard-1 trace checked as reshard 0", lambda o: None, "all-gathered again", ["--gathers", "reshard0"])
broken("a reshard-0 trace checked as reshard 1", lambda o: None, "no all-gather of it since its previous use",
       ["--gathers", "reshard1"], base="z3r0")
good["nowait"] = make_trace(3, nowait=True)
rc, o = ct(good["nowait"], ["--gathers", "reshard1"], "v6.json")
check(rc == 0, "check_trace: gathers that end inside their use pass without --strict")
broken("blocks used before their all-gathers ended (--strict)", lambda o: None, "before its all-gather ends",
       ["--gathers", "reshard1", "--strict"], base="nowait")
rc, o = ct(good["z3"], ["--gathers", "reshard1", "--strict"], "v7.json")
check(rc == 0, "check_trace --strict: the synthetic stage-3 trace (waits before use) passes")
def gather_late(o):  # block 1's backward gather ends after the use ends
    evs = o["traceEvents"]
    ub = [e for e in evs if e["ph"] == "B" and e["pid"] == 0 and e["name"] == "block 1"][1]
    ue = None
    depth = 0
    i0 = evs.index(ub)
    for e in evs[i0 + 1:]:
        if e.get("tid") == 0 and e["pid"] == 0 and e["ph"] in "BE":
            if e["ph"] == "B": depth += 1
            elif depth == 0: ue = e; break
            else: depth -= 1
    gb = [i for i, e in enumerate(evs) if e.get("tid") == 1 and e["pid"] == 0 and e["ph"] == "B"
          and e["args"]["kind"] == "all-gather" and e["args"]["unit"] == 4][1]
    # move the gather's end (and everything after it on the comm track) past the use's end
    shift = ue["ts"] + 1.0 - evs[gb + 1]["ts"]
    for e in evs[gb + 1:]:
        if e.get("tid") == 1 and e["pid"] == 0 and e["ph"] in "BE":
            e["ts"] += shift
broken("a block's gather that ends after its use", gather_late, "ends before its all-gather does",
       ["--gathers", "reshard1"])

# ledger check (module API): counters within the allocated bytes of each category
maxes = {}
for e in good["z3"]["traceEvents"]:
    if e["ph"] == "C":
        for k, v in e["args"].items():
            maxes[k] = max(maxes.get(k, 0), v)
led = {r: dict(maxes) for r in (0, 1)}
check(check_trace.check(good["z3"], ledger=led) == [], "check_trace --ledger: counters within the ledger pass")
led2 = copy.deepcopy(led); led2[1]["gathered units (transient)"] -= 1
e = check_trace.check(good["z3"], ledger=led2)
check(len(e) == 1 and "reaches %d bytes, more than the %d" % (maxes["gathered units (transient)"], maxes["gathered units (transient)"] - 1) in e[0],
      "check_trace --ledger: a counter above its allocation fails: %s" % e[:1])
led3 = copy.deepcopy(led); del led3[0]["activations"]
e = check_trace.check(good["z3"], ledger=led3)
check(len(e) == 1 and "not a ledger category" in e[0], "check_trace --ledger: an unknown category fails")
rl = check_trace.read_ledger(T("n2z3.txt"))
check(list(rl) == [0] and rl[0]["params"] == plot.parse_ledger(txt("n2z3"))["per_shard"] * 4,
      "check_trace.read_ledger reads rank 0's allocated bytes from the stdout")

print("%d passed, %d failed" % (npass, nfail))
sys.exit(1 if nfail else 0)
PY
