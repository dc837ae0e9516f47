#!/usr/bin/env bash
# Overlap, prefetch, resharding, HSDP and the trace change timing, never a
# number. Every run trains the same tiny model for 3 steps and writes a
# checkpoint; at each rank count N the checkpoints must be bitwise equal:
#  - to the stage-0 run without overlap (the deterministic collectives make
#    stages 0-3 reduce the same sums in the same order);
#  - with the communication thread on (--overlap 1) and off, prefetch 0 or
#    2, reshard_after_forward 0 or 1, the embedding kept (--reshard-embedding
#    0), with gradient accumulation (overlap on vs off at the same stage);
#  - with LLMC_POISON=1, which fills every released gathered buffer with
#    NaN: a unit used without waiting for its gather would read NaN (and a
#    gradient buffer reused before its reduce-scatter finished would change
#    the sums), so bitwise equality means every wait is there.
# HSDP: --shard-group N is the default bit for bit; G = 2 and 1 on 4 ranks
# agree with the flat run within 1e-5 (other sums; with PROG=the bf16
# program: within the distance between the flat bf16 and fp32 runs, since
# HSDP only rounds the groups' partial sums once more) and their ledger and
# traffic (inside and across groups) equal the plan (the trainer exits 2
# otherwise). The trace of a stage-3 run is valid Chrome trace JSON whose
# comm track has an all-gather of every block before its forward and its
# backward (reshard 1), and none before the backward with reshard 0.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
PROG=${PROG:-./train_gpt_cpu}
COMMON="-e d2 --channels 64 --heads 2 --max-seq-len 64 -t 32 -b 2 -x 3 -v 0 -s 0 -u 1 -l 1e-2"

run() { # name np args... -> $tmp/name/model_00000003.bin
  local name=$1 np=$2; shift 2
  if timeout 120 $MPIRUN -np "$np" $PROG $COMMON -o "$tmp/$name" "$@" > "$tmp/$name.out" 2>&1; then return 0; fi
  bad "$name: exit $? ($(grep -m1 -E 'error|ERROR' "$tmp/$name.out"))"; return 1
}
md5() { md5sum "$tmp/$1/model_00000003.bin" 2>/dev/null | cut -c1-32; }
same() { # label base run
  if [ -n "$(md5 "$2")" ] && [ "$(md5 "$2")" = "$(md5 "$3")" ]; then ok "$1"; else bad "$1: checkpoint differs from $2"; fi
}

for n in 2 3 4; do
  run "b$n" $n -z 0 --overlap 0 || continue
  for cfg in "z0o1|-z 0 --overlap 1" "z1o0|-z 1 --overlap 0" "z1o1|-z 1 --overlap 1" "z2o0|-z 2 --overlap 0" \
             "z2o1|-z 2 --overlap 1" "z3o0|-z 3 --overlap 0" "z3p0r1|-z 3 --prefetch 0" "z3p2r1|-z 3 --prefetch 2" \
             "z3p0r0|-z 3 --prefetch 0 --reshard-after-forward 0" "z3p2r0|-z 3 --prefetch 2 --reshard-after-forward 0" \
             "z3e0|-z 3 --reshard-embedding 0"; do
    name=${cfg%%|*}; flags=${cfg#*|}
    LLMC_POISON=1 run "$name$n" $n $flags --vocab-chunk 8192 && same "N=$n $name (poisoned releases) == stage 0 without overlap" "b$n" "$name$n"
  done
done
# one micro-step is not the only case: with accumulation, overlap on == off at the same stage
for z in 2 3; do
  run "a${z}o0" 3 -z $z -d 384 --overlap 0 && LLMC_POISON=1 run "a${z}o1" 3 -z $z -d 384 --overlap 1 &&
    same "N=3 stage $z, 2 micro-steps: overlap on == off" "a${z}o0" "a${z}o1"
done

# HSDP on 4 ranks
run hflat 4 -z 3 && run hg4 4 -z 3 --shard-group 4 && same "HSDP --shard-group 4 on 4 ranks == no flag, bit for bit" hflat hg4
TOL=1e-5
if [ "$PROG" != ./train_gpt_cpu ] && PROG=./train_gpt_cpu run hflat32 4 -z 3; then
  TOL=$(/usr/bin/python3 - "$tmp/hflat/main.log" "$tmp/hflat32/main.log" <<'PY'
import sys
def losses(p): return [float(l.split()[3]) for l in open(p) if l.split()[2] == "train_loss"]
print("%.3e" % max(abs(x - y) / abs(y) for x, y in zip(losses(sys.argv[1]), losses(sys.argv[2]))))
PY
)
  echo "     bound: the flat run differs from the fp32 program's by $TOL (relative)"
fi
for g in 2 1; do
  for z in 1 3; do
    if run "h${g}z$z" 4 -z $z --shard-group $g; then
      if /usr/bin/python3 - "$tmp/hflat/main.log" "$tmp/h${g}z$z/main.log" "$TOL" <<'PY'
import sys
def losses(p): return [float(l.split()[3]) for l in open(p) if l.split()[2] == "train_loss"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"     max relative difference to the flat stage-3 run: {worst:.2e} (bound {float(sys.argv[3]):.2e})")
sys.exit(0 if len(a) == len(b) == 3 and worst <= float(sys.argv[3]) else 1)
PY
      then ok "HSDP G=$g stage $z on 4 ranks: losses == flat stage 3 within $TOL; ledger and traffic == plan"
      else bad "HSDP G=$g stage $z: losses differ from the flat run"; fi
      grep -q "HSDP: .* across the $((4 / g)) groups" "$tmp/h${g}z$z.out" && ok "HSDP G=$g stage $z: traffic split inside / across groups printed" \
        || bad "HSDP G=$g stage $z: no inside/across line"
    fi
  done
done
# bad HSDP flags: one line, exit 1
out=$($MPIRUN -np 4 $PROG $COMMON -z 3 --shard-group 3 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(echo "$out" | grep -c '^error: --shard-group 3: must divide')" = 1 ] && ok "--shard-group 3 on 4 ranks: one error line, exit 1" \
  || bad "--shard-group 3 on 4 ranks: rc $rc"
out=$($MPIRUN -np 4 $PROG $COMMON -z 0 --shard-group 2 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(echo "$out" | grep -c '^error: --shard-group 2: stage 0')" = 1 ] && ok "--shard-group at stage 0: one error line, exit 1" \
  || bad "--shard-group at stage 0: rc $rc"

# the trace
for r in 1 0; do
  if run "tr$r" 2 -z 3 --reshard-after-forward $r --trace "$tmp/trace$r.json" --trace-steps 2:2; then
    if /usr/bin/python3 - "$tmp/trace$r.json" "$r" <<'PY'
import sys, json
d = json.load(open(sys.argv[1])); reshard = sys.argv[2] == "1"
ev = d["traceEvents"]
assert d["metadata"]["zero_stage"] == 3 and d["metadata"]["num_ranks"] == 2
for e in ev:
    assert {"ph", "pid"} <= e.keys(), e
    if e["ph"] in "BEC": assert "ts" in e and "tid" in e, e
    if e["ph"] == "B": assert "name" in e, e
tracks = {}
for e in ev:
    if e["ph"] in "BE": tracks.setdefault((e["pid"], e["tid"]), []).append(e)
assert len(tracks) == 4, tracks.keys()
for k, es in tracks.items():
    depth = 0
    for a, b in zip(es, es[1:]): assert a["ts"] <= b["ts"], (k, a, b)
    for e in es:
        depth += 1 if e["ph"] == "B" else -1
        assert depth >= 0, k
    assert depth == 0, k
# per rank: the all-gathers of block units, in order, and the forward/backward block events
for pid in (0, 1):
    comm = [e for e in tracks[(pid, 1)] if e["ph"] == "B"]
    comp = [e for e in tracks[(pid, 0)] if e["ph"] == "B"]
    assert all(e["args"]["kind"] in ("all-gather", "reduce-scatter", "embedding rows all-gather", "all-reduce") for e in comm if "args" in e)
    blocks = sorted({e["args"]["unit"] for e in comp if e["name"].startswith("block ")})
    assert len(blocks) == 2, blocks
    gathers = [e["args"]["unit"] for e in comm if e["name"] == "all-gather"]
    for u in blocks:
        n = gathers.count(u)
        want = 2 if reshard else 1
        assert n == want, f"block unit {u}: {n} all-gathers, expected {want}"
    # each block use in forward comes after its gather was issued: the gather's begin precedes the use's end
    mem = [e for e in ev if e["ph"] == "C" and e["pid"] == pid]
    assert mem and "gathered units (transient)" in mem[0]["args"]
    peak = max(e["args"]["gathered units (transient)"] for e in mem)
    assert peak > 0
print("trace ok")
PY
    then ok "trace (stage 3, reshard $r): valid JSON, B/E pairs, monotonic tracks, $([ $r = 1 ] && echo 2 || echo 1) all-gather(s) per block per step, memory counters"
    else bad "trace (stage 3, reshard $r)"; fi
    if /usr/bin/python3 dev/check_trace.py "$tmp/trace$r.json" --ledger "$tmp/tr$r.out" --gathers reshard$r --strict; then
      ok "dev/check_trace.py --strict: every block's gather ends before its compute begins; memory counters within the ledger"
    else bad "dev/check_trace.py on the stage-3 trace (reshard $r)"; fi
  fi
done
summary
