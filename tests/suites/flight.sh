#!/usr/bin/env bash
# Flight records that stay true (llmc/flight.h, dev/flight.py):
#  1. two runs into one -o (a 4-rank hang, then a 2-rank one, as a -y 1 on
#     fewer ranks leaves it): every dump carries its run's id (rank 0's, the
#     same on every rank) and the world size; dev/flight.py reads only the
#     newest run's dumps ("1 of 2 ranks") and names the files of the older
#     run it ignored;
#  2. the verdict names every rank that left no dump, also one whose data
#     had arrived before it was lost (dumps made up here: ranks 0, 1 wait
#     for rank 3 only; ranks 2 and 3 left none);
#  3. a dump never blocks the abort: a fifo at OUT/flight/rank_0.json.tmp
#     (the file is opened non-blocking) and a dump that stalls (the test
#     hook LLMC_TEST_FLIGHT_STALL_S: the watchdog ends the rank after its
#     10 s bound) both let --collective-timeout (10 s) end the job.
# Every wait is bounded.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d -p /var/tmp llmc-flight-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
TO=10   # (3 s timed out before the hang on a loaded 2-core machine, load average 28)
RUN=(./train_gpt_cpu -i "data/brown/brown_train_*.bin" -v 0 -s 0 -e d2 -b 1 -t 32 -z 3 -x 10 --collective-timeout $TO)
hang() { # out np hang-spec -o dir [env...]: a run whose ranks stop at step 3; prints exit code and seconds
  local out=$1 np=$2 spec=$3 dir=$4; shift 4
  local t0; t0=$(date +%s.%N)
  # odls_base_sigkill_timeout 10: the hung (not silent) rank writes its dump on mpirun's SIGTERM before
  # the SIGKILL; Open MPI's default 1 s lost it under load (a busy loop on each core: 1 dump of the 4-rank run)
  timeout 150 $MPIRUN -np "$np" --mca odls_base_sigkill_timeout 10 -x LLMC_TEST_HANG="$spec" "$@" "${RUN[@]}" -o "$dir" > "$out" 2>&1
  local rc=$?
  echo "$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
}

# --- 1. two runs into one -o
read -r rc1 dt1 < <(hang "$tmp/a.out" 4 "2:3,3:3:silent" "$tmp/o")
read -r rc2 dt2 < <(hang "$tmp/b.out" 2 "1:3:silent" "$tmp/o")
fl=$(python3 dev/flight.py "$tmp/o" 2>&1); frc=$?
runs=$(python3 - "$tmp/o/flight" <<'EOF'
import glob, json, os, re, sys
out = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "rank_*.json"))):
    x = json.load(open(f))
    ok = x.get("format") == "llmc-flight 2" and re.fullmatch("[0-9a-f]{16}", x.get("run", "")) and x.get("run_start", 0) > 0
    out.append("%s:%s:%s:%s" % (os.path.basename(f), x.get("run") if ok else "BAD", x.get("world"), x.get("rank")))
print(" ".join(out))
EOF
)
new=$(sed -n 's/^rank_0.json:\([0-9a-f]*\):2:0.*/\1/p' <<<"${runs%% *}")
old=$(tr ' ' '\n' <<<"$runs" | sed -n 's/^rank_1.json:\([0-9a-f]*\):4:1$/\1/p')
if [ "$rc1" != 0 ] && [ "$rc1" != 124 ] && [ "$rc2" != 0 ] && [ "$rc2" != 124 ] && [ -n "$new" ] && [ -n "$old" ] && [ "$new" != "$old" ] \
   && [ "$(tr ' ' '\n' <<<"$runs" | grep -c ":$old:4:")" -ge 2 ]; then
  ok "every dump carries its run id and world size: $runs"
else bad "run ids: exits $rc1 / $rc2, dumps '$runs'"; fi
if [ $frc = 0 ] && grep -q "^flight records in .*: 1 of 2 ranks of run $new " <<<"$fl" \
   && grep -q "^ignored rank_1.json: run $old of 4 ranks" <<<"$fl" \
   && [ "$(grep -c "^ignored rank_[123].json: run $old of 4 ranks" <<<"$fl")" = "$(tr ' ' '\n' <<<"$runs" | grep -c ":$old:4:")" ] \
   && grep -q "^verdict: rank 1 (node [^)]*) left no dump" <<<"$fl"; then
  ok "dev/flight.py reads the newest run (2 ranks) and names the older run's files: $(grep -m1 "^ignored" <<<"$fl")"
else bad "dev/flight.py on two runs in one -o (exit $frc):"; echo "$fl" | head -8; fi

# --- 2. every rank without a dump is named (ranks 0, 1 wait for rank 3 only; rank 2's data had come)
mkdir -p "$tmp/made/flight"
python3 - "$tmp/made/flight" <<'EOF'
import json, os, sys
for r in (0, 1):
    rec = {"seq": 9, "comm": 0, "call": 5, "kind": "all-gather", "unit": 2, "step": 4, "micro_step": 0, "bytes": 64, "thread": "comm",
           "state": "waiting", "issued": 99.0, "started": 99.0, "ended": None, "arrived": [q for q in (0, 1, 2) if q != r], "waiting_for": [3]}
    d = {"format": "llmc-flight 2", "run": "00000000000000aa", "run_start": 90.0, "rank": r, "world": 4, "node": "a", "pid": 1,
         "reason": "collective timeout", "detail": "", "time": 110.0, "step": 4, "micro_step": 0, "capacity": 64,
         "nodes": ["a", "a", "b", "b"], "recorded": 9,
         "communicators": [{"id": 0, "label": "shard group", "ranks": [0, 1, 2, 3], "calls": 5}], "records": [rec]}
    json.dump(d, open(os.path.join(sys.argv[1], "rank_%d.json" % r), "w"))
EOF
fl=$(python3 dev/flight.py "$tmp/made" 2>&1)
if grep -q "^verdict: ranks 2, 3 (node b) left no dump and the data of rank 3 (node b) never came" <<<"$fl" \
   && grep -q "^  rank 2 (node b): left no dump" <<<"$fl"; then ok "the verdict names both ranks without a dump: $(grep -m1 "left no dump and" <<<"$fl" | cut -c1-140)"
else bad "the verdict on ranks 2, 3 without a dump:"; echo "$fl"; fi

# --- 3. a dump never blocks the abort
mkdir -p "$tmp/fifo/flight" && mkfifo "$tmp/fifo/flight/rank_0.json.tmp"
read -r rc dt < <(hang "$tmp/c.out" 2 "1:3:silent" "$tmp/fifo")
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && awk -v d="$dt" -v t=$TO 'BEGIN { exit !(d < t + 30) }' && grep -q "did not complete in $TO s" "$tmp/c.out"; then
  ok "a fifo at OUT/flight/rank_0.json.tmp: the timeout ($TO s) still ended the job (exit $rc, $dt s)"
else bad "a fifo at OUT/flight/rank_0.json.tmp: exit $rc after $dt s (124: the dump blocked the abort)"; tail -3 "$tmp/c.out"; fi
read -r rc dt < <(hang "$tmp/d.out" 2 "1:3:silent" "$tmp/stall" -x LLMC_TEST_FLIGHT_STALL_S=600)
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && awk -v d="$dt" -v t=$TO 'BEGIN { exit !(d < t + 10 + 30) }' \
   && grep -qE "^error \(rank [01]\): writing its flight record .*rank_[01].json took over 10 s \(a hung file system under -o\?\): ending this rank without it" "$tmp/d.out"; then
  ok "a dump that stalls: the watchdog ended the rank after its 10 s bound (exit $rc, $dt s): $(grep -m1 "took over" "$tmp/d.out" | cut -c1-60)..."
else bad "a stalled dump: exit $rc after $dt s"; grep -E "^error" "$tmp/d.out" | head -3; fi
summary
