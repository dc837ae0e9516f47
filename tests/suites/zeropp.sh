#!/usr/bin/env bash
# ZeRO++ (docs/zeropp.md): --quantize-weights int8 (qwZ), --quantize-grads
# int8|int4 (qgZ), --secondary-shard node|K (hpZ), at stage 3:
#  1. bad flags: one error line naming the flag, exit 1 on every rank;
#  2. determinism: the same run twice, --overlap 0 with --prefetch 2, a
#     resume from a checkpoint, and disk offload are bitwise equal to the
#     plain run of the same options (both CPU programs, all three options);
#  3. hpZ changes no number: == plain -z 3 and == --reshard-after-forward 0
#     --reshard-embedding 0, bit for bit (with qwZ too: == qwZ with keeping);
#  4. bytes: every run's traffic table counted == predicted, the ledger
#     allocated == predicted; hpZ's primary + secondary all-gather bytes ==
#     plain stage 3's all-gather bytes; its secondary shard row == p x (the
#     padded params less the root unit) / K; the records' ratio to bf16 is
#     (1 + 4/B) / 2 for int8 and (1/2 + 4/B) / 2 for int4 (B = block size,
#     plus at most 1% for the partial blocks at tensor starts);
#  5. HSDP (--shard-group 2) and gradient accumulation compose (counted ==
#     predicted, overlap-neutral);
#  the trace passes check_trace.py (hpZ's secondary gathers are gathers);
#  6. a NaN in a weight shard or a unit grad (LLMC_TEST_NONFINITE) is
#     refused: one line naming the tensor and the step, exit non-zero, no
#     checkpoint of that step;
#  7. the quantized run still trains: its loss after 3 steps is within 0.01
#     of the plain run's (measured: 5e-5 for int8, 3e-4 for int4 grads; the
#     margin only catches a broken scale, which moves it by > 0.1).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s train_gpt_cpu train_gpt_cpu_bf16 >/dev/null 2>&1 || { bad "make train_gpt_cpu train_gpt_cpu_bf16"; summary; exit 1; }
DATA="-i data/brown/brown_train_*.bin"
TINY="-e d2 --channels 64 --heads 2 --max-seq-len 64 -b 2 -t 32"

run() { # name np prog args...: a run into $tmp/name (log $tmp/name.log)
  local name=$1 np=$2 prog=$3; shift 3
  timeout 300 $MPIRUN -np "$np" ./$prog $DATA -v 0 -s 0 -o "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || { bad "$name: $prog $* exit $rc"; tail -4 "$tmp/$name.log"; return 1; }
  grep -q "ledger: OK" "$tmp/$name.log" || { bad "$name: no 'ledger: OK'"; return 1; }
  grep -q "traffic: OK" "$tmp/$name.log" || { bad "$name: no 'traffic: OK' (counted != predicted)"; grep "ERROR" "$tmp/$name.log" | head -3; return 1; }
}
same() { # ref name step what
  local s
  s=$(printf '%08d' "$3")
  if [ -s "$tmp/$1/model_$s.bin" ] && cmp -s "$tmp/$1/model_$s.bin" "$tmp/$2/model_$s.bin" && cmp -s "$tmp/$1/state_$s.bin" "$tmp/$2/state_$s.bin"
  then ok "$4: model and state bitwise equal to $1"; else bad "$4: differs from $1 (or missing)"; fi
}
handed() { # log collective-name: the handed bytes of that row of the traffic table
  awk -v n="$2" 'index($0, "  " n " ") == 1 { $0 = substr($0, length(n) + 3); print $2; exit }' "$1"
}
loss3() { grep "^step    3/" "$1" | sed 's/.*loss \([0-9.]*\).*/\1/'; }

# --- 1. bad flags
badflag() { # what np args...
  local what=$1 np=$2; shift 2
  local out rc
  out=$(timeout 60 $MPIRUN -np "$np" ./train_gpt_cpu $DATA $TINY -x 1 -v 0 -s 0 "$@" 2>&1); rc=$?
  local n
  n=$(grep -c "^error" <<<"$out")
  if [ $rc -ne 0 ] && [ "$n" = 1 ] && grep -q -- "$what" <<<"$out"; then ok "refused ($*): $(grep '^error' <<<"$out" | cut -c1-150)"
  else bad "$*: exit $rc, $n error lines: $(grep '^error' <<<"$out" | head -2)"; fi
}
badflag "--quantize-weights" 2 -z 3 --quantize-weights int3
badflag "--quantize-grads" 2 -z 3 --quantize-grads int2
badflag "--secondary-shard" 2 -z 3 --secondary-shard 1
badflag "needs -z 3" 2 -z 2 --quantize-weights int8
badflag "needs -z 3" 2 -z 1 --quantize-grads int4
badflag "needs -z 3" 2 -z auto --secondary-shard 2
badflag "--secondary-shard 3" 4 -z 3 --secondary-shard 3
badflag "are on one node (from the hosts. names: .*: ranks 0,1,2,3)" 4 -z 3 --secondary-shard node
badflag "--node-size 3" 4 -z 3 --quantize-grads int8 --node-size 3
badflag "--node-size" 2 -z 3 --quantize-grads int8 --node-size x

# --- 2, 3. determinism and neutrality
ALL="-z 3 --quantize-weights int8 --quantize-grads int8 --secondary-shard 2 --node-size 2"
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  A="$TINY -x 3"
  run "$prog-z3" 4 $prog $A -z 3 || continue
  run "$prog-all" 4 $prog $A $ALL && run "$prog-all-again" 4 $prog $A $ALL && same "$prog-all" "$prog-all-again" 3 "$prog qwZ+qgZ+hpZ run twice"
  run "$prog-all-ov0" 4 $prog $A $ALL --overlap 0 --prefetch 2 && same "$prog-all" "$prog-all-ov0" 3 "$prog qwZ+qgZ+hpZ --overlap 0 --prefetch 2"
  run "$prog-hpz" 4 $prog $A -z 3 --secondary-shard 2 && same "$prog-z3" "$prog-hpz" 3 "$prog hpZ alone (exact gathers: plain stage 3's numbers)"
  run "$prog-keep" 4 $prog $A -z 3 --reshard-after-forward 0 --reshard-embedding 0 && same "$prog-keep" "$prog-hpz" 3 "$prog hpZ == keeping every unit gathered"
  run "$prog-qw" 4 $prog $A -z 3 --quantize-weights int8 --secondary-shard 2 && run "$prog-qw-keep" 4 $prog $A -z 3 --quantize-weights int8 --reshard-after-forward 0 --reshard-embedding 0 \
    && same "$prog-qw-keep" "$prog-qw" 3 "$prog qwZ+hpZ == qwZ keeping every unit gathered"
  run "$prog-all-off" 4 $prog $A $ALL --offload-optimizer "disk:$tmp" && same "$prog-all" "$prog-all-off" 3 "$prog qwZ+qgZ+hpZ with the optimizer on disk"
  # resume: 4 steps, checkpoints every 2; then the first 2 again and -y 1 to 4
  run "$prog-r4" 4 $prog $TINY -x 4 -n 2 $ALL && run "$prog-r2" 4 $prog $TINY -x 2 $ALL && cp -r "$tmp/$prog-r2" "$tmp/$prog-ry" \
    && run "$prog-ry" 4 $prog $TINY -x 4 -y 1 $ALL && same "$prog-r4" "$prog-ry" 4 "$prog qwZ+qgZ+hpZ resumed at step 2"
  # 7. still trains, close to the plain run
  for name in all qw; do
    l0=$(loss3 "$tmp/$prog-z3.log"); l1=$(loss3 "$tmp/$prog-$name.log")
    if [ -n "$l0" ] && [ -n "$l1" ] && awk -v a="$l0" -v b="$l1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 && a != b) }'; then
      ok "$prog $name: loss at step 3 $l1 vs plain $l0 (differs, by under 0.01)"
    else bad "$prog $name: loss at step 3 '$l1' vs plain '$l0'"; fi
  done
done

# --- 4. bytes (bf16 program, 4 ranks)
L="$tmp/train_gpt_cpu_bf16"
p=$(handed "$L-z3.log" "all-gather"); a=$(handed "$L-hpz.log" "all-gather"); s=$(handed "$L-hpz.log" "secondary all-gather (hpZ)")
if [ -n "$p" ] && [ -n "$s" ] && [ $((a + s)) = "$p" ] && [ "$s" -gt 0 ]; then ok "hpZ: primary $a + secondary $s B == plain stage 3's all-gather $p B"
else bad "hpZ all-gather bytes: primary '$a' + secondary '$s' vs plain '$p'"; fi
params=$(awk '$1 == "params" { print $2; exit }' "$L-hpz.log")
root=$(awk '/^    root \(wpe, lnf\)/ { for (i = 1; i <= NF; i++) if ($i == "x") { print $(i + 1); exit } }' "$L-hpz.log")
sec=$(awk '/^  secondary shard \(hpZ\)/ { print $4; exit }' "$L-hpz.log")
if [ -n "$params" ] && [ -n "$root" ] && [ -n "$sec" ] && [ "$sec" = $(( (params * 4 / 2 - root) * 2 / 2 )) ]; then
  ok "hpZ ledger: secondary shard $sec B == 2 B x (padded params $((params * 4 / 2)) - root $root) / K=2"
else bad "hpZ ledger: secondary '$sec' B, params '$params' B, root '$root' elements"; fi
for B in 256 64; do
  run "qw-b$B" 4 train_gpt_cpu_bf16 $TINY -x 2 -z 3 --quantize-weights int8 --quantize-weights-block $B --quantize-grads int4 --quantize-grads-block $B || continue
  rw=$(sed -n 's/.*qwZ: .*(\([0-9.]*\)x)$/\1/p' "$tmp/qw-b$B.log"); rg=$(sed -n 's/.*qgZ: .*record \([0-9.]*\)x its bf16 bytes/\1/p' "$tmp/qw-b$B.log")
  if awk -v r="$rw" -v b=$B 'BEGIN { f = (1 + 4 / b) / 2; exit !(r != "" && r >= f - 0.0005 && r <= f + 0.01) }'; then ok "qwZ records, block $B: ${rw}x the bf16 bytes (formula (1 + 4/B)/2 = $(awk -v b=$B 'BEGIN { printf "%.4f", (1 + 4 / b) / 2 }'))"
  else bad "qwZ records, block $B: '${rw}'x"; fi
  if awk -v r="$rg" -v b=$B 'BEGIN { f = (0.5 + 4 / b) / 2; exit !(r != "" && r >= f - 0.0005 && r <= f + 0.01) }'; then ok "qgZ int4 records, block $B: ${rg}x the bf16 bytes (formula (1/2 + 4/B)/2 = $(awk -v b=$B 'BEGIN { printf "%.4f", (0.5 + 4 / b) / 2 }'))"
  else bad "qgZ records, block $B: '${rg}'x"; fi
done

# --- 5. HSDP and accumulation
run "hsdp" 4 train_gpt_cpu_bf16 $TINY -x 3 -z 3 --shard-group 2 --quantize-weights int8 --quantize-grads int4 && \
  run "hsdp-ov0" 4 train_gpt_cpu_bf16 $TINY -x 3 -z 3 --shard-group 2 --quantize-weights int8 --quantize-grads int4 --overlap 0 && \
  same hsdp hsdp-ov0 3 "HSDP (--shard-group 2) with qwZ + qgZ int4, overlap off"
run "acc" 4 train_gpt_cpu $TINY -x 3 -d 512 $ALL && run "acc-ov0" 4 train_gpt_cpu $TINY -x 3 -d 512 $ALL --overlap 0 && \
  same acc acc-ov0 3 "2 micro-steps per step with qwZ+qgZ+hpZ, overlap off"
if [ -f "$tmp/acc.log" ] && grep -q "secondary all-gather (hpZ)" "$tmp/acc.log"; then ok "accumulation: counted == predicted with the secondary gathers of every micro-step"
else bad "accumulation: no secondary all-gather row in the traffic table of $tmp/acc.log"; fi
# int4 gradients over two hops (2 nodes of 2 by --node-size), both programs
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  run "$prog-g4" 4 $prog $TINY -x 3 -z 3 --quantize-grads int4 --node-size 2 && run "$prog-g4-ov0" 4 $prog $TINY -x 3 -z 3 --quantize-grads int4 --node-size 2 --overlap 0 \
    && same "$prog-g4" "$prog-g4-ov0" 3 "$prog qgZ int4 over 2 x 2 (both hops), overlap off"
  l0=$(loss3 "$tmp/$prog-z3.log"); l1=$(loss3 "$tmp/$prog-g4.log")
  if [ -n "$l0" ] && [ -n "$l1" ] && awk -v a="$l0" -v b="$l1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 && a != b) }'; then
    ok "$prog qgZ int4 2 x 2: loss at step 3 $l1 vs plain $l0 (differs, by under 0.01)"
  else bad "$prog qgZ int4 2 x 2: loss at step 3 '$l1' vs plain '$l0'"; fi
  if grep -q "^  reduce-scatter node (qgZ) " "$tmp/$prog-g4.log" && grep -q "^  reduce-scatter nodes (qgZ) " "$tmp/$prog-g4.log"; then ok "$prog qgZ 2 x 2: both hops counted (== predicted)"
  else bad "$prog qgZ 2 x 2: a hop's row is missing"; fi
done
# hpZ that has nothing to keep says so
out=$(timeout 60 $MPIRUN -np 4 ./train_gpt_cpu $DATA $TINY -x 1 -v 0 -s 0 -z 3 --secondary-shard 2 --reshard-after-forward 0 --reshard-embedding 0 2>&1)
grep -q "^warning: --secondary-shard 2 has no effect" <<<"$out" && ok "hpZ with every unit kept: a warning says it does nothing" || bad "hpZ with nothing to keep: no warning"
out=$(timeout 60 $MPIRUN -np 2 ./train_gpt_cpu $DATA $TINY -x 1 -v 0 -s 0 -z 1 --node-size 3 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^warning: --node-size 3 has no effect" <<<"$out" && ok "--node-size without hpZ or qgZ: a warning, not an error" || bad "--node-size unused: exit $rc"


# --- the trace: hpZ's secondary gathers count as a unit's all-gather for check_trace.py's rules
if run trace 4 train_gpt_cpu $TINY -x 2 $ALL --trace "$tmp/zpp.json"; then
  r=$(/usr/bin/python3 dev/check_trace.py "$tmp/zpp.json" --ledger "$tmp/trace.log" --gathers reshard1 2>&1)
  [ $? = 0 ] && ok "check_trace.py on a qwZ+qgZ+hpZ trace (every use after a gather of its unit): $r" || bad "check_trace.py on the qwZ+qgZ+hpZ trace: $r"
  n=$(grep -o '"name":"secondary all-gather (hpZ)"' "$tmp/zpp.json" | wc -l)
  [ "$n" -gt 0 ] && ok "the trace has $n secondary all-gather spans" || bad "no secondary all-gather spans in the trace"
fi

# --- 6. non-finite values refused
nanrun() { # what env args...
  local what=$1 envv=$2; shift 2
  local out rc
  rm -rf "$tmp/nan"
  out=$(LLMC_TEST_NONFINITE=$envv timeout 120 $MPIRUN -np 4 ./train_gpt_cpu_bf16 $DATA $TINY -x 4 -n 1 -v 0 -s 0 -o "$tmp/nan" "$@" 2>&1); rc=$?
  local line
  line=$(grep "^error (rank 0): $what" <<<"$out" | head -1)
  if [ $rc -ne 0 ] && [ -n "$line" ] && grep -q "at step 2" <<<"$line" && [ ! -e "$tmp/nan/model_00000002.bin" ] && [ -e "$tmp/nan/model_00000001.bin" ]; then
    ok "a NaN at step 2 refused: $line; checkpoint 1 kept, none of step 2"
  else bad "NaN ($envv): exit $rc, '$line'"; fi
}
nanrun "--quantize-weights: parameter tensor" weights:2 -z 3 --quantize-weights int8
nanrun "--quantize-grads: gradient of tensor" grads:2 -z 3 --quantize-grads int8 --node-size 2
nanrun "--quantize-grads: gradient of tensor" grads:2 -z 3 --quantize-grads int4 --node-size 1
summary
