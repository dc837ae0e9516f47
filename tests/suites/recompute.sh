#!/usr/bin/env bash
# Activation recomputation (-r 0..3, llmc/gpt.h):
#  1. the numbers do not change: for a fixed rank count, -r 1, 2, 3 give the
#     checkpoint and training state of -r 0 bit for bit, in both CPU
#     programs, at stages 0-3 (2 ranks), with gradient accumulation, with
#     overlap off and on, --prefetch 2, --reshard-after-forward 0, under
#     LLMC_POISON=1 (the recompute buffers are NaN before every layer's
#     backward), and on 1 rank;
#  2. the ledger: allocated == predicted at every -r (the run exits 2
#     otherwise), the activations row is exactly L B T x (what -r keeps per
#     token) + the part outside the blocks (the same at every -r), the
#     recompute buffers row exactly B T x (one layer's recomputed bytes per
#     token), from the formulas of gpt2_recompute_per_token; the estimator
#     counts the same bytes;
#  3. stage 3 at -r 3: the same traffic as -r 0, collective by collective
#     (the recompute uses the gather backward already makes);
#  4. the trace: a "recompute block l" span on the compute track inside
#     every block's backward, and check_trace.py's gather rules still hold;
#  5. a budget only -r 3 meets: -r 0 and -r 2 are refused, -r 3 trains in
#     it; -z auto under that budget chooses a recompute level, not offload.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s train_gpt_cpu train_gpt_cpu_bf16 >/dev/null 2>&1 || { bad "make train_gpt_cpu train_gpt_cpu_bf16"; summary; exit 1; }
DATA="-i data/brown/brown_train_*.bin"
TINY="-e d2 --channels 64 --heads 2 --max-seq-len 64"
PY=/usr/bin/python3

run() { # name np prog args...: a run into $tmp/name; sets OUT
  local name=$1 np=$2 prog=$3; shift 3
  OUT=$(timeout 300 $MPIRUN -np "$np" ./$prog $DATA -v 0 -s 0 -o "$tmp/$name" "$@" 2>&1)
  local rc=$?
  [ $rc = 0 ] || { bad "$name: $prog $* exit $rc"; echo "$OUT" | tail -4; return 1; }
  grep -q "ledger: OK" <<<"$OUT" || { bad "$name: no 'ledger: OK'"; return 1; }
  echo "$OUT" > "$tmp/$name.log"
}
same() { # what ref name step: model and state of run name == ref at step
  local ref=$1 name=$2 step=$3 what=$4 s
  s=$(printf '%08d' "$step")
  if [ -s "$tmp/$ref/model_$s.bin" ] && cmp -s "$tmp/$ref/model_$s.bin" "$tmp/$name/model_$s.bin" \
     && cmp -s "$tmp/$ref/state_$s.bin" "$tmp/$name/state_$s.bin"; then ok "$what: model and state bitwise equal to $ref"
  else bad "$what: differs from $ref (or missing)"; fi
}

# --- 1. bitwise
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  A="$TINY -b 2 -t 32 -x 3"
  run "$prog-ref" 2 $prog $A -z 0 -r 0 || continue
  for z in 0 1 2 3; do
    for r in 0 1 2 3; do
      [ $z = 0 ] && [ $r = 0 ] && continue
      run "$prog-z$z-r$r" 2 $prog $A -z $z -r $r && same "$prog-ref" "$prog-z$z-r$r" 3 "$prog -np 2 -z $z -r $r"
    done
  done
  G="$TINY -b 1 -t 32 -d 128 -x 3"
  run "$prog-acc" 2 $prog $G -z 2 -r 0 && for r in 1 3; do
    run "$prog-acc-r$r" 2 $prog $G -z 2 -r $r && same "$prog-acc" "$prog-acc-r$r" 3 "$prog -np 2 -z 2 -d 128 (2 micro-steps) -r $r"
  done
  run "$prog-z3x" 2 $prog $A -z 3 -r 0 --overlap 0 --prefetch 2 --reshard-after-forward 0 && for r in 2 3; do
    OUT=""; run "$prog-z3x-r$r" 2 $prog $A -z 3 -r $r --overlap 0 --prefetch 2 --reshard-after-forward 0 &&
      same "$prog-z3x" "$prog-z3x-r$r" 3 "$prog -np 2 -z 3 --overlap 0 --prefetch 2 --reshard-after-forward 0 -r $r"
  done
  for r in 1 2 3; do
    OUT=$(LLMC_POISON=1 timeout 300 $MPIRUN -np 2 ./$prog $DATA -v 0 -s 0 -o "$tmp/$prog-poison-r$r" $A -z 3 -r $r --prefetch 2 2>&1) \
      && same "$prog-ref" "$prog-poison-r$r" 3 "$prog LLMC_POISON=1 -z 3 --prefetch 2 -r $r" || bad "$prog LLMC_POISON=1 -r $r: exit $?"
  done
  run "$prog-n1" 1 $prog $A -z 0 -r 0 && run "$prog-n1-r3" 1 $prog $A -z 0 -r 3 && same "$prog-n1" "$prog-n1-r3" 3 "$prog -np 1 -r 3"
done

# --- 2. the ledger's activation rows against the formulas (d2 default shapes: C=128 NH=2)
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  x=4; [ $prog = train_gpt_cpu_bf16 ] && x=2
  B=2 T=64 C=128 NH=2 L=2
  declare -A act rc
  for r in 0 1 2 3; do
    o=$(timeout 120 ./$prog -e d2 -b $B -t $T -x 1 -v 0 -s 0 -r $r --keep-logits 0 2>&1)   # (a training run: -x 0 plans for evaluation only; the LM head holds one chunk of logits)
    act[$r]=$(awk '$1 == "activations" { print $2; exit }' <<<"$o")
    rc[$r]=$(awk '$1 == "recompute" && $2 == "buffers" { print $4; exit }' <<<"$o")
    e=$(timeout 60 ./$prog --estimate -e d2 -b $B -t $T -r $r --ranks 1 2>&1 | sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p')
    [ -n "$e" ] && [ "$e" = $(( ${act[$r]:-0} + ${rc[$r]:-0} )) ] && ok "$prog -r $r: the estimator's activations $e B == ledger activations + recompute buffers" \
      || bad "$prog -r $r: estimator '$e' vs ledger ${act[$r]} + ${rc[$r]:-0}"
  done
  kept() { case $1 in 0) echo $((18*C*x + NH*T*x + 16));; 1) echo $((14*C*x + NH*T*x + 16));; 2) echo $((12*C*x + NH*T*x + 16));; 3) echo $((C*x));; esac; }
  trans() { case $1 in 0) echo 0;; 1) echo $((4*C*x));; 2) echo $((5*C*x));; 3) echo $((17*C*x + NH*T*x + 16));; esac; }
  outside=$(( ${act[0]} - L*B*T*$(kept 0) ))
  for r in 0 1 2 3; do
    want=$(( L*B*T*$(kept $r) + outside )); wt=$(( B*T*$(trans $r) ))
    if [ "${act[$r]}" = "$want" ] && [ "${rc[$r]:-0}" = "$wt" ]; then
      ok "$prog -r $r: activations ${act[$r]} B = L B T x $(kept $r) + $outside outside the blocks; recompute buffers ${rc[$r]:-0} B = B T x $(trans $r)"
    else bad "$prog -r $r: activations ${act[$r]} (want $want), recompute buffers ${rc[$r]:-0} (want $wt)"; fi
  done
  unset act rc
done

# --- 3. stage-3 traffic at -r 3 == -r 0
tt() { sed -n '/^traffic, rank/,/traffic: OK/p' "$tmp/$1.log" | grep -v "^traffic, rank"; }
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  if [ -s "$tmp/$prog-z3-r3.log" ] && [ -n "$(tt $prog-z3-r3)" ] && [ "$(tt $prog-z3-r0)" = "$(tt $prog-z3-r3)" ]; then
    ok "$prog -z 3 -r 3: every collective's calls and bytes equal -r 0's (no gather added: $(tt $prog-z3-r3 | awk '$1 == "all-gather" {print $2 " all-gathers"}'))"
  else bad "$prog -z 3 -r 3: the traffic table differs from -r 0"; fi
done

# --- 4. the trace
if run trace-r3 2 train_gpt_cpu $TINY -b 2 -t 32 -x 2 -z 3 -r 3 --trace "$tmp/r3.json"; then
  r=$($PY dev/check_trace.py "$tmp/r3.json" --ledger "$tmp/trace-r3.log" --gathers reshard1 2>&1)
  [ $? = 0 ] && ok "check_trace.py on the -r 3 trace: $r" || bad "check_trace.py on the -r 3 trace: $r"
  n=$($PY - "$tmp/r3.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
spans = [e for e in ev if e.get("ph") in ("X", "B") and str(e.get("name", "")).startswith("recompute block ")]
blocks = [e for e in ev if e.get("ph") in ("X", "B") and str(e.get("name", "")).startswith("block ")]
tids = sorted({e.get("tid") for e in spans})
btids = sorted({e.get("tid") for e in blocks})
print(len(spans), ",".join(map(str, tids)), ",".join(map(str, btids)))
PY
)
  set -- $n
  # 2 ranks x the traced step (the last, by default) x L=2 blocks, on the compute track of the blocks
  [ "${1:-0}" = 4 ] && [ "${2:-}" = "${3:-x}" ] && ok "the trace has $1 'recompute block l' spans (2 ranks x 1 traced step x 2 blocks) on the blocks' compute track (tid $2)" \
    || bad "recompute spans in the trace: '$n' (want 4 on the compute track)"
fi

# --- 5. a budget only -r 3 meets (d6, fp32, B=4 T=256, 1 rank)
P="-e d6 -b 4 -t 256 -x 1 -z 1 --keep-logits 0"   # (fixed: keeping the logits is no way out here)
peak() { sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$1"; }
o2=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 $P -r 2 2>&1); p2=$(peak "$o2")
o3=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 $P -r 3 2>&1); p3=$(peak "$o3")
LIM=$(awk -v a="$p3" -v b="$p2" 'BEGIN { printf "%.0f", (a + (b - a) / 2) * 1e9 }')
o=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 $P -r 0 --memory-limit $LIM 2>&1); rc0=$?
o=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 $P -r 2 --memory-limit $LIM 2>&1); rc2=$?
o=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 $P -r 3 --memory-limit $LIM 2>&1); rc3=$?
R=$(sed -n 's/.*used \/ predicted = \([0-9.]*\);.*/\1/p' <<<"$o")
if [ $rc0 = 1 ] && [ $rc2 = 1 ] && [ $rc3 = 0 ] && awk -v r="$R" 'BEGIN { exit !(r >= 0.95 && r <= 1.05) }'; then
  ok "d6 B=4 T=256 in $LIM B (between the -r 3 peak $p3 and the -r 2 peak $p2 GB): -r 0 and -r 2 refused, -r 3 trains (used / predicted $R)"
else bad "budget $LIM B: -r 0 exit $rc0, -r 2 exit $rc2, -r 3 exit $rc3 (ratio '$R')"; fi
o=$(timeout 300 ./train_gpt_cpu $DATA -v 0 -s 0 -e d6 -b 4 -t 256 -x 1 -z auto --memory-limit $LIM 2>&1); rc=$?
ch=$(sed -n 's/^-z auto: chose \([^:]*\):.*/\1/p' <<<"$o")
if [ $rc = 0 ] && grep -q -- "-r [123]" <<<"$ch" && ! grep -q offload <<<"$ch"; then ok "-z auto in $LIM B: chose '$ch' (recompute before offload)"
else bad "-z auto in $LIM B: exit $rc, chose '$ch'"; fi
summary
