#!/usr/bin/env bash
# The fit check and -z auto (llmc/fit.h, llmc/gpt_fit.h):
#  1. the predicted per-rank peak against what the ranks used (the largest
#     VmHWM over the ranks, printed at the end of every run as "fit check:
#     ... used / predicted = R"): within 5% for d2 at stages 0-3 on 1-4
#     ranks, d6 at stages 0 and 3 on 1, 2 and 4 ranks, the optimizer
#     offloaded to disk, both programs; d12 (GPT-2 124M) in bf16 at stage 3;
#  2. a configuration over --memory-limit is refused before anything is
#     allocated: one "error: zero_stage S needs X GB per rank" line naming
#     the budget and what fits, exit 1, no output files; --fit-check 0 runs
#     it with a warning;
#  2b. --keep-logits auto (the default): kept in a roomy budget (the ledger of
#     --keep-logits 1, activations B*T*(Vp-Vc)*4 bytes more), recomputed in a
#     budget between the two peaks (the ledger of --keep-logits 0), bitwise
#     the same checkpoints; --keep-logits 2 is one error line;
#  3. -z auto in three budgets taken from its own table: roomy -> stage 0,
#     between the best stage-3 peak and the best stage 0-2 peak -> stage 3,
#     below every peak without offload -> the offloaded optimizer (with
#     --offload-optimizer disk:DIR), nothing at all -> one error line;
#     the -z auto run's model equals the run of the flags it chose, bit for
#     bit; a -z auto state resumes under another budget (another stage) to
#     the uninterrupted run's checkpoint, bit for bit;
#  5. one decision for all ranks: ranks measuring different compute rates
#     (LLMC_TEST_FLOPS_SCALE) choose one configuration from the slowest
#     rate; two programs, or different flags, in one job: one error line
#     naming what differs and the ranks; the user's flags stay fixed in the
#     search; -x 0 holds no grads or optimizer states, is predicted so and
#     fits where training does not;
#  4. on the simulated cluster with memory-limited nodes (scripts/cluster.sh
#     up 2 --mem M, memory cgroups): the trainer reads the node's limit
#     (naming the cgroup file) less what the node's cgroup holds beyond the
#     rank (Open MPI's daemon),
#     refuses stage 0, trains stage 3 within it, and with --fit-check 0 the
#     kernel's OOM killer ends the job (mpirun names the rank and node, no
#     hang, no process left). Needs root (else skipped and counted).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
NAME=${LLMC_FIT_CLUSTER_NAME:-llmcfit}   # (another name beside a concurrent run of this suite)
cleanup() { [ "$(id -u)" = 0 ] && scripts/cluster.sh --name $NAME down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
make -s train_gpt_cpu train_gpt_cpu_bf16 >/dev/null 2>&1 || { bad "make train_gpt_cpu train_gpt_cpu_bf16"; summary; exit 1; }
for p in train_gpt_cpu train_gpt_cpu_bf16; do
  [ -f build/fit/$p.workspace ] || ./$p --calibrate-workspace >/dev/null 2>&1 || bad "$p --calibrate-workspace"
done
DATA="-i data/brown/brown_train_*.bin -j data/brown/brown_val_*.bin"

ratio_of() { sed -n 's/^fit check: predicted peak .* used \/ predicted = \([0-9.]*\);.*/\1/p' <<<"$1"; }
within5() { awk -v r="$1" 'BEGIN { exit !(r != "" && r >= 0.95 && r <= 1.05) }'; }

# --- 1. predicted peak vs VmHWM
accuracy() { # prog n args...: one run, one check
  local prog=$1 n=$2; shift 2
  local out r
  # (generous limits: on a busy 2-core machine a d6 step takes ~30 s, longer
  # than the default 60 s collective timeout can allow a rank's first step)
  out=$(timeout 900 $MPIRUN -np "$n" ./$prog $DATA -v 0 -s 0 --collective-timeout 600 "$@" 2>&1)
  r=$(ratio_of "$out")
  if within5 "$r"; then ok "$prog -np $n $*: used / predicted = $r"
  else bad "$prog -np $n $*: used / predicted = '${r:-no fit check line}' (expected 0.95..1.05)"; echo "$out" | grep -E "^error" | head -3; echo "$out" | tail -5; fi
}
for prog in train_gpt_cpu train_gpt_cpu_bf16; do
  for n in 1 2 3 4; do
    for z in 0 1 2 3; do accuracy $prog $n -e d2 -b 2 -t 64 -x 1 -z $z; done
  done
  for n in 1 2 4; do
    for z in 0 3; do accuracy $prog $n -e d6 -b 4 -t 128 -x 1 -z $z; done
  done
  mkdir -p "$tmp/off"
  accuracy $prog 2 -e d6 -b 4 -t 128 -x 1 -z 3 --offload-optimizer "disk:$tmp/off"
done
accuracy train_gpt_cpu_bf16 2 -e d12 -b 1 -t 64 -x 1 -z 3

# --- 2. refusal below the budget, --fit-check 0
BIN=./train_gpt_cpu
ARGS="-e d2 -b 2 -t 64 -x 2"
# (--keep-logits 0: the refusal of one fixed configuration; 2b has the default, auto)
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -z 0 --keep-logits 0 2>&1)
P0=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$out")
LIM=$(awk -v p="$P0" 'BEGIN { printf "%.0f", p * 1e9 * 0.9 }')   # 10% below the stage-0 peak
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -z 0 --keep-logits 0 --memory-limit $LIM -o "$tmp/refused/ck" 2>&1); rc=$?
n_err=$(grep -c "^error: " <<<"$out")
if [ $rc -ne 0 ] && [ "$n_err" = 1 ] && grep -q "^error: -e d2 (L=2 C=128, [0-9.e+]* parameters) at zero_stage 0 needs [0-9.]* GB per rank (model states [0-9.]* GB = (p+g+k) Psi = 16 Psi, .*the budget is [0-9.]* GB per rank (rank 0 on node [^,]*, the smallest over the 2 ranks: --memory-limit: .*Fits: -z [123]" <<<"$out"; then
  ok "-z 0 --memory-limit $LIM (90% of its peak $P0 GB): refused, exit $rc, one error line naming the budget and what fits"
else bad "-z 0 --memory-limit $LIM: rc $rc, $n_err error lines: $(grep -m1 '^error' <<<"$out")"; fi
if grep -q "^step\|^memory ledger" <<<"$out"; then bad "the refused run allocated or trained"; else ok "the refused run printed no ledger and no step (refused before allocating)"; fi
if [ -e "$tmp/refused/ck" ] || ls "$tmp"/refused/* >/dev/null 2>&1; then bad "the refused run wrote files under -o"; else ok "the refused run wrote no output file"; fi
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -z 0 --keep-logits 0 --memory-limit $LIM --fit-check 0 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "^warning: --fit-check 0: zero_stage 0 needs" <<<"$out" && grep -q "^step    2/2" <<<"$out"; then ok "--fit-check 0: runs anyway, with one warning"
else bad "--fit-check 0: rc $rc"; echo "$out" | tail -3; fi
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -z 3 --memory-limit 1000000 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "^error: -e d2 .* at zero_stage 3 needs .*No stage fits 2 ranks at -b 2 -t 64, even offloaded or with -r 3" <<<"$out"; then ok "a budget nothing fits: says so"
else bad "--memory-limit 1000000: rc $rc: $(grep -m1 '^error' <<<"$out")"; fi
out=$($BIN -e d2 --memory-limit 12X 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "^error: flag --memory-limit: '12X'" <<<"$out"; then ok "--memory-limit 12X: one error naming the flag"; else bad "--memory-limit 12X: rc $rc: $out"; fi

# --- 2b. --keep-logits auto (the default): kept where the run with them fits
# every rank's budget, else recomputed; the same numbers either way (peaks
# are compared through the ledger's exact total: the baseline, VmRSS, moves
# by a few hundred kB from process to process)
peak_of() { sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$1"; }
total_of() { awk '/^  = total/ {print $3; exit}' <<<"$1"; }
act_of() { awk '$1 == "activations" {print $2; exit}' <<<"$1"; }
KL="-e d2 -b 2 -t 64 -x 2 -z 1"
oa=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $KL -o "$tmp/kla" 2>&1); ra=$?
o1=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $KL --keep-logits 1 -o "$tmp/kl1" 2>&1); r1=$?
o0=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $KL --keep-logits 0 -o "$tmp/kl0" 2>&1); r0=$?
PA=$(peak_of "$oa"); P1=$(peak_of "$o1"); PK0=$(peak_of "$o0")
# the logits buffer: B*T*Vp floats kept, B*T*Vc (one chunk) recomputed; d2: Vp 50304 in
# K = ceil(50304 / 8192) = 7 equal chunks of Vc = ceil(50304 / 7) = 7187 rows (llmc/gpt_shard.h:
# gpt2_layout_init; at C = 128 on 2 ranks any row count is a whole number of shard granules)
want=$((2 * 64 * (50304 - 7187) * 4))
got=$(( $(act_of "$o1") - $(act_of "$o0") ))
if [ $ra = 0 ] && [ $r1 = 0 ] && [ $r0 = 0 ] && [ "$(total_of "$oa")" = "$(total_of "$o1")" ] &&
   grep -q "^logits: kept from forward to backward (--keep-logits not given: the predicted peak with the B\*T\*Vp logits kept is [0-9.]* GB per rank, within the budget" <<<"$oa"; then
  ok "--keep-logits not given, a roomy budget: kept (the 'logits:' line: $PA GB per rank, within the budget), the ledger ($(total_of "$oa") B) equals --keep-logits 1's"
else bad "--keep-logits auto, roomy: rc $ra/$r1/$r0, peaks $PA / $P1, $(grep -m1 '^logits:' <<<"$oa")"; fi
[ "$got" = "$want" ] && ok "kept logits: the ledger's activations grow by B*T*(Vp - Vc)*4 = 2*64*(50304-7187)*4 = $want bytes" ||
  bad "kept logits: activations grew by $got bytes, expected $want"
if cmp -s "$tmp/kla/model_00000002.bin" "$tmp/kl0/model_00000002.bin" && cmp -s "$tmp/kl1/model_00000002.bin" "$tmp/kl0/model_00000002.bin"; then
  ok "--keep-logits auto, 1 and 0: bitwise equal checkpoints after 2 steps"
else bad "--keep-logits auto / 1 / 0: checkpoints differ"; fi
LIM=$(awk -v a="$PK0" -v b="$P1" 'BEGIN { printf "%.0f", (a + b) / 2 * 1e9 }')   # between the two peaks
ob=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $KL --memory-limit $LIM -o "$tmp/klb" 2>&1); rb=$?
if [ $rb = 0 ] && [ "$(total_of "$ob")" = "$(total_of "$o0")" ] &&
   grep -q "^logits: recomputed in backward, chunk by chunk (--keep-logits not given: the predicted peak with the B\*T\*Vp logits kept is [0-9.]* GB per rank, over the budget" <<<"$ob" &&
   cmp -s "$tmp/klb/model_00000002.bin" "$tmp/kl0/model_00000002.bin"; then
  ok "--memory-limit $LIM (between $PK0 and $P1 GB): recomputed, the ledger ($(total_of "$ob") B) and the checkpoint of --keep-logits 0"
else bad "--keep-logits auto in $LIM B: rc $rb, ledger $(total_of "$ob") (want $(total_of "$o0")), $(grep -m1 -E '^(logits|error):' <<<"$ob")"; fi
out=$($BIN -e d2 --keep-logits 2 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^error' <<<"$out")" = 1 ] && grep -q "^error: flag --keep-logits: '2' must be auto, 0 or 1" <<<"$out"; then ok "--keep-logits 2: one error naming the flag and its values"
else bad "--keep-logits 2: rc $rc: $out"; fi

# --- 3. -z auto
mkdir -p "$tmp/odir"
# -r 0 given: the recompute levels are not candidates here (tests/suites/recompute.sh has them)
auto() { # budget extra...: sets OUT, RC, CHOSEN (the flags it chose)
  OUT=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -r 0 -z auto ${1:+--memory-limit $1} "${@:2}" 2>&1); RC=$?
  CHOSEN=$(sed -n 's/^-z auto: chose \(.*\): \(the fastest\|nothing fits\).*/\1/p' <<<"$OUT")
}
auto "" --offload-optimizer "disk:$tmp/odir"
# the table rows: peak GB, fits, across MB, inside MB, compute, comm+io, step ms, flags...
ROWS=$(awk '$2 == "yes" || $2 == "no" { if ($1 ~ /^[0-9.]+$/) print }' <<<"$OUT")
minpeak() { awk -v want="$1" '{ f = ""; for (i = 8; i <= NF; i++) f = f " " $i; off = f ~ /offload/; s = $9;
  if ((want == "3" && s == 3 && !off) || (want == "012" && s < 3 && !off) || (want == "off" && off)) if (m == "" || $1 < m) m = $1 }
  END { print m }' <<<"$ROWS"; }
P3=$(minpeak 3); P012=$(minpeak 012); POFF=$(minpeak off)
if [ $RC = 0 ] && [ "${CHOSEN%% *}" = "-z" ] && [ "$(awk '{print $2}' <<<"$CHOSEN")" = 0 ]; then ok "roomy budget: -z auto chose '$CHOSEN' (stage 0: least communication, ties go to the lower stage)"
else bad "roomy budget: rc $RC, chose '$CHOSEN'"; echo "$OUT" | grep "auto" | head -3; fi
if [ -n "$P3" ] && [ -n "$P012" ] && [ -n "$POFF" ] && awk -v a="$POFF" -v b="$P3" -v c="$P012" 'BEGIN { exit !(a < b && b < c) }'; then
  ok "the table's smallest peaks: offloaded $POFF < stage 3 $P3 < stages 0-2 $P012 GB"
else bad "the table's smallest peaks: offloaded '$POFF', stage 3 '$P3', stages 0-2 '$P012'"; fi
mid() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (a + b) / 2 * 1e9 }'; }
TIGHT=$(mid "$P3" "$P012"); TIGHTER=$(mid "$POFF" "$P3")
auto "$TIGHT"
if [ $RC = 0 ] && [ "$(awk '{print $2}' <<<"$CHOSEN")" = 3 ] && ! grep -q offload <<<"$CHOSEN"; then ok "budget $TIGHT B (between $P3 and $P012 GB): chose '$CHOSEN'"
else bad "budget $TIGHT B: rc $RC, chose '$CHOSEN'"; fi
R=$(ratio_of "$OUT")
if within5 "$R" && awk -v r="$R" -v p="$P3" -v t="$TIGHT" 'BEGIN { exit !(r * p * 1e9 <= t) }'; then ok "the chosen stage-3 run used $R of its prediction, within the budget"
else bad "the chosen run: used / predicted '$R' (budget $TIGHT B)"; fi
AUTO_FLAGS=$CHOSEN
auto "$TIGHTER"
if [ $RC -ne 0 ] && grep -q "^error: -z auto: none of the [0-9]* configurations fits .*; with the optimizer offloaded it would fit: -z [123].* --offload-optimizer disk:DIR ([0-9.]* GB)$" <<<"$OUT"; then ok "budget $TIGHTER B without a disk dir: one error, names the offloaded configuration that would fit"
else bad "budget $TIGHTER B without a disk dir: rc $RC: $(grep -m1 '^error' <<<"$OUT")"; fi
auto "$TIGHTER" --offload-optimizer "disk:$tmp/odir"
if [ $RC = 0 ] && grep -q -- "--offload-optimizer disk:$tmp/odir" <<<"$CHOSEN" && grep -q "nothing fits without offload" <<<"$OUT"; then ok "budget $TIGHTER B (below every peak without offload): chose '$CHOSEN'"
else bad "budget $TIGHTER B with a disk dir: rc $RC, chose '$CHOSEN'"; grep -m3 -E '^error|^-z auto' <<<"$OUT"; fi
auto 1000000
if [ $RC -ne 0 ] && [ "$(grep -c '^error' <<<"$OUT")" = 1 ] && grep -q "^error: -z auto: none of the.*(not even with the optimizer offloaded)$" <<<"$OUT"; then ok "budget 1 MB: one error line, exit $RC, no offload suggested (it would not fit either)"; else bad "budget 1 MB: rc $RC: $(grep -m1 '^error' <<<"$OUT")"; fi

# the auto run's model == the run of the flags it chose (bitwise)
$MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 4 -r 0 -z auto --memory-limit "$TIGHT" -o "$tmp/a" >/dev/null 2>&1
$MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 4 $AUTO_FLAGS -o "$tmp/b" >/dev/null 2>&1
if [ -s "$tmp/a/model_00000004.bin" ] && cmp -s "$tmp/a/model_00000004.bin" "$tmp/b/model_00000004.bin"; then ok "-z auto (chose $AUTO_FLAGS) == the same flags given: model bitwise equal"
else bad "-z auto vs $AUTO_FLAGS: models differ or missing"; fi
if grep -q "^start step 0: ranks 2 zero_stage 3 .* (chosen by -z auto)$" "$tmp/a/runs.txt" 2>/dev/null; then ok "-o DIR/runs.txt records the concrete configuration: $(cat "$tmp/a/runs.txt")"
else bad "runs.txt of the -z auto run: '$(cat "$tmp/a/runs.txt" 2>/dev/null)'"; fi
# a -z auto state resumed under a roomy budget (another stage) == uninterrupted
first=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 2 -n 2 -r 0 -z auto --memory-limit "$TIGHT" -o "$tmp/c" 2>&1)
out=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 4 -z auto -y 1 -o "$tmp/c" 2>&1)
if [ -s "$tmp/c/model_00000004.bin" ] && cmp -s "$tmp/c/model_00000004.bin" "$tmp/a/model_00000004.bin"; then
  ok "-z auto state (stage 3) resumed by -z auto under no limit ($(sed -n 's/^-z auto: chose \([^:]*\):.*/\1/p' <<<"$out")) == uninterrupted, bitwise"
else bad "resume of a -z auto state: model differs or missing"; { echo "$first"; echo "$out"; } | grep -m4 "error\|resum"; fi
if [ "$(wc -l < "$tmp/c/runs.txt" 2>/dev/null)" = 2 ] && grep -q "^start step 2: ranks 2 zero_stage 0 " "$tmp/c/runs.txt"; then ok "runs.txt after the resume: a second line, the new concrete stage"
else bad "runs.txt after the resume: '$(cat "$tmp/c/runs.txt" 2>/dev/null)'"; fi

# --- 5. one decision for all ranks
# ranks that measure very different compute rates (one 100x slower: LLMC_TEST_FLOPS_SCALE) still choose one configuration
ISSUE="-e d2 -b 2 -t 64 -x 3 -z auto -r 0 --link-gbps 10 --memory-limit 157500000 -v 0 -s 0"
out=$($MPIRUN -np 1 -x LLMC_TEST_FLOPS_SCALE=0.01 $BIN $DATA $ISSUE : -np 1 $BIN $DATA $ISSUE 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(grep -c '^-z auto: chose' <<<"$out")" = 1 ] && grep -q "^step    3/3" <<<"$out"; then
  ok "-z auto with one rank measuring 100x slower: one choice for both ranks ($(sed -n 's/^-z auto: chose \([^:]*\):.*/\1/p' <<<"$out")), trained"
else bad "-z auto with ranks of different rates: rc $rc: $(grep -m1 'error\|chose' <<<"$out")"; fi
F=$(sed -n 's/.*compute \([0-9.]*\) GFLOP\/s per rank (measured, the slowest rank.s).*/\1/p' <<<"$out")
out1=$($MPIRUN -np 2 $BIN $DATA $ISSUE 2>&1)
F1=$(sed -n 's/.*compute \([0-9.]*\) GFLOP\/s per rank (measured, the slowest rank.s).*/\1/p' <<<"$out1")
awk -v a="$F" -v b="$F1" 'BEGIN { exit !(a != "" && b != "" && a > 0 && a < b / 20) }' && ok "the cost model takes the slowest rank's rate: $F GFLOP/s (both ranks unscaled: $F1)" \
  || bad "the agreed compute rate: '$F' with one rank scaled by 0.01, '$F1' without"
# ranks started differently: one line naming what differs and the ranks, exit 1, no hang
out=$(timeout 120 $MPIRUN -np 1 ./train_gpt_cpu $DATA $ARGS -v 0 -s 0 : -np 1 ./train_gpt_cpu_bf16 $DATA $ARGS -v 0 -s 0 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^error' <<<"$out")" = 1 ] && grep -q "^error: the ranks would run different flags: rank 1 has program = cpu-bf16 where rank 0 has program = cpu-fp32 (the ranks that differ from rank 0: 1 (node " <<<"$out"; then
  ok "the fp32 and the bf16 program in one job: one error naming the program and rank 1"
else bad "two programs in one job: rc $rc: $(grep -m1 '^error' <<<"$out")"; fi
out=$(timeout 120 $MPIRUN -np 2 $BIN $DATA $ARGS -v 0 -s 0 -z 1 : -np 1 $BIN $DATA $ARGS -v 0 -s 0 -z 3 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: the ranks would run different flags: rank 2 has argv\[[0-9]*\] = 3 where rank 0 has argv\[[0-9]*\] = 1 (the ranks that differ from rank 0: 2 (node " <<<"$out"; then
  ok "ranks started with -z 1 and -z 3: one error naming the argument and rank 2"
else bad "ranks with different flags: rc $rc: $(grep -m1 '^error' <<<"$out")"; fi
# the flags the user gives stay fixed in -z auto's search
auto "" --keep-logits 0
if [ $RC = 0 ] && ! grep -q -- "--keep-logits 1" <<<"$OUT" && grep -q "^-z auto: chose" <<<"$OUT"; then ok "-z auto --keep-logits 0: no candidate changes it (chose '$CHOSEN')"
else bad "-z auto --keep-logits 0: rc $RC, a row with --keep-logits 1: $(grep -m1 -- '--keep-logits 1' <<<"$OUT")"; fi
auto "" --reshard-embedding 1 -b 2 -d 512
if [ $RC = 0 ] && ! grep -q -- "--reshard-embedding 0\| -b 1" <<<"$OUT"; then ok "-z auto --reshard-embedding 1 -b 2 -d 512: neither changes (chose '$CHOSEN')"
else bad "-z auto --reshard-embedding 1 -b 2: rc $RC: $(grep -m1 -- '^error\|--reshard-embedding 0\| -b 1' <<<"$OUT")"; fi
OUT=$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 -e d2 -t 64 -x 1 -r 0 -z auto -d 512 2>&1)
if grep -qE -- " -b 1( |$)" <<<"$OUT" && grep -qE -- " -b 2( |$)" <<<"$OUT"; then ok "-z auto -d 512 without -b: smaller micro-batches (-b 2, -b 1) are candidates"
else bad "-z auto -d 512 without -b: no -b 2 / -b 1 candidates"; fi
# -x 0: no grads, no optimizer states; predicted so; it fits where training does not
out=$($MPIRUN -np 2 $BIN $DATA $ARGS -x 0 -s 0 -z 1 2>&1); rc=$?
z=$(awk '($1 == "grads" && $2 == 0 && $3 == 0) || ($1 == "adam" && $3 == 0 && $4 == 0) { n++ } END { print n + 0 }' <<<"$out")
if [ $rc = 0 ] && [ "$z" = 3 ] && grep -q "^  ledger: OK" <<<"$out" && grep -q "evaluation only" <<<"$out" && grep -q "^val loss" <<<"$out"; then
  ok "-x 0: grads, adam m, adam v are 0 predicted and 0 allocated, the ledger OK, evaluated"
else bad "-x 0 ledger: rc $rc, $z empty optimizer rows"; echo "$out" | grep -E "^  (grads|adam|master)" ; fi
PE=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$out")
PT=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$($MPIRUN -np 2 $BIN $DATA $ARGS -x 1 -v 0 -s 0 -z 1 --keep-logits 0 2>&1)")
BUD=$(awk -v a="$PE" -v b="$PT" 'BEGIN { printf "%.0f", (a + b) / 2 * 1e9 }')
out=$($MPIRUN -np 2 $BIN $DATA $ARGS -x 0 -s 0 -z 1 --memory-limit $BUD 2>&1); rc=$?
out2=$($MPIRUN -np 2 $BIN $DATA $ARGS -x 1 -v 0 -s 0 -z 1 --keep-logits 0 --memory-limit $BUD 2>&1); rc2=$?
if [ $rc = 0 ] && [ $rc2 != 0 ] && awk -v a="$PE" -v b="$PT" 'BEGIN { exit !(a > 0 && a < 0.7 * b) }'; then
  ok "-x 0 predicts $PE GB against training's $PT GB: in $BUD B it evaluates, training is refused"
else bad "-x 0 ($PE GB) against training ($PT GB) in $BUD B: rc $rc / $rc2"; fi

# --- 4. memory-limited nodes (cgroups)
if [ "$(id -u)" != 0 ]; then skip "memory-limited nodes: skipped (needs root: scripts/cluster.sh)"; summary; exit; fi
if ! unshare --net --uts true 2>/dev/null; then skip "memory-limited nodes: skipped (needs network namespaces)"; summary; exit; fi
if [ ! -d /sys/fs/cgroup/memory ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  skip "memory-limited nodes: skipped (needs a memory cgroup hierarchy: /sys/fs/cgroup/memory or cgroup v2; not mounted here)"; summary; exit
fi
CL="scripts/cluster.sh --name $NAME"
# the 2-node budget: between the stage-3 and the stage-0 peak of one rank per node
P0=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 1 -z 0 2>&1)")
P3R=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB per rank.*/\1/p' <<<"$($MPIRUN -np 2 $BIN $DATA -v 0 -s 0 $ARGS -x 1 -z 3 2>&1)")
MEM=$(awk -v a="$P3R" -v b="$P0" 'BEGIN { printf "%.0f", (a + (b - a) * 0.3) * 1e9 }')
if out=$($CL up 2 --mem "$MEM" 2>&1); then ok "up 2 --mem $MEM: $out"; else bad "up 2 --mem $MEM: $out"; summary; exit 1; fi
CG0=$(sed -n 's/^cg0=//p' /run/llmc-cluster/$NAME/state)
lim=$(cat "$CG0/memory.limit_in_bytes" 2>/dev/null || cat "$CG0/memory.max" 2>/dev/null)
[ -n "$lim" ] && [ $((MEM - lim)) -ge 0 ] && [ $((MEM - lim)) -lt 4096 ] && ok "node 0's cgroup limit $lim B (= $MEM rounded to a page)" || bad "node 0's cgroup limit '$lim' (wanted $MEM)"
run_cl() { timeout 300 $CL run -np 2 --map-by ppr:1:node -- $BIN $DATA -v 0 -s 0 $ARGS "$@" 2>&1; }
out=$(run_cl -z 0); rc=$?
if [ $rc -ne 0 ] && grep -q "^error: -e d2 .* at zero_stage 0 needs .*the budget is [0-9.]* GB per rank (rank \([01]\) on node $NAME-node\1, the smallest over the 2 ranks: cgroup v[12] .*llmc-$NAME/$NAME-node\1/memory\.\(limit_in_bytes\|max\): [0-9.]* GB, less [0-9.]* GB held by other processes of the cgroup, / 1 rank of the node)" <<<"$out"; then
  ok "-z 0 on nodes of $MEM B: refused, names the node's cgroup file"
else bad "-z 0 on nodes of $MEM B: rc $rc: $(grep -m1 '^error' <<<"$out")"; fi
# the node's other resident (Open MPI's daemon) is taken off the budget
held=$(sed -n 's/^memory: .*, less \([0-9.e+-]*\) GB held by other processes of the cgroup.*/\1/p' <<<"$(run_cl -z 3 -x 1)" | head -1)
awk -v h="$held" 'BEGIN { exit !(h != "" && h > 0.001 && h < 0.2) }' && ok "the budget takes off what the node's cgroup holds beyond the rank (Open MPI's daemon): $held GB" \
  || bad "the budget's other residents: '$held' GB (expected the daemon's few MB)"
out=$(run_cl -z 3); rc=$?
R=$(ratio_of "$out")
if [ $rc = 0 ] && within5 "$R"; then ok "-z 3 on nodes of $MEM B: trains, used / predicted = $R"; else bad "-z 3 on nodes of $MEM B: rc $rc, ratio '$R'"; fi
out=$(run_cl -z auto); rc=$?
if [ $rc = 0 ] && grep -q "^-z auto: chose -z [123]" <<<"$out"; then ok "-z auto on nodes of $MEM B: $(sed -n 's/^-z auto: chose \([^:]*\):.*/\1/p' <<<"$out")"; else bad "-z auto on the nodes: rc $rc"; fi
# far over the limit with the check off: the OOM killer ends a rank, mpirun ends the job
$CL mem "$(awk -v a="$P3R" 'BEGIN { printf "%.0f", a * 0.6 * 1e9 }')" >/dev/null
t0=$(date +%s)
out=$(run_cl -z 0 --fit-check 0); rc=$?
dt=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "process rank [01] with PID [0-9]* on node $NAME-node[01] exited on signal 9" <<<"$out"; then
  ok "--fit-check 0 over the node's memory: OOM-killed, the job ended in $dt s (rc $rc), mpirun names the rank: $(grep -o "process rank [01] with PID [0-9]* on node $NAME-node[01]" <<<"$out")"
else bad "--fit-check 0 over the node's memory: rc $rc after $dt s: $(tail -3 <<<"$out")"; fi
kills=$($CL status | awk -v n="$NAME-node" 'index($1, n) == 1 && NF == 6 { k += $6 } END { print k + 0 }')
[ "$kills" -ge 1 ] && ok "status counts $kills OOM kill(s) in the node cgroups" || bad "status shows no OOM kill"
sleep 1
left=$(cat "$CG0/cgroup.procs" "${CG0%0}1/cgroup.procs" 2>/dev/null | wc -l)
[ "$left" = 0 ] && ok "no process left in the nodes' cgroups" || bad "$left processes left in the nodes' cgroups"
base=${CG0%/*}
$CL down >/dev/null 2>&1
[ ! -d "$base" ] && ok "down removed the cgroups ($base)" || bad "down left $base"
summary
