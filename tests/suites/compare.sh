#!/usr/bin/env bash
# dev/compare_runs.py on real runs (make train's model shrunk: d2 with 64
# channels, B=2 T=32, 5 steps, a checkpoint at 5):
#   - stage 0 and stage 3 on 2 ranks: every metric and both checkpoints
#     bitwise equal, --expect-equal exits 0;
#   - the fp32 and the bf16 program: not bitwise; the largest relative
#     train-loss difference it prints equals the one computed here from the
#     two main.log files, and is within 2e-2, the bound test_gpt.cu derives
#     for the bf16 program's step losses against float64 (TOL_STEP_LOSS);
#     --expect-equal exits 1; the model files' per-tensor differences are
#     printed;
#   - the overlay picture is written (PNG, nonzero size); bad input (no
#     main.log, an empty main.log) is one error line, exit 1;
#   - what only one run has is a difference: the stage-0 run with its loss
#     made -nan at step 2 fails --tol 0.01 and --expect-equal, naming the
#     step (a NaN never exceeds a running maximum, so it must be caught on
#     its own); the run cut after step 3 (main.log's first lines, no final
#     checkpoint) fails --expect-equal and --tol, naming the steps and the
#     checkpoint only the whole run has; val losses over another val set
#     (val_tokens) fail --tol; an identical copy passes both;
#   - checkpoints: a run that saved more of them (-n 2: steps 2, 4, 5, as a
#     stopped and resumed run has its interrupt's checkpoint) passes
#     --expect-equal against the -n 5 run, naming steps 2 and 4 as not
#     compared; a copy without state_00000005.bin fails it, and so does a
#     copy with an extra model_00000003.bin without its state, and so do a
#     copy of the -n 2 run without model_00000004.bin (a state without its
#     model) and two copies whose step 5 has only the state (issue 49 item 12).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in train_gpt_cpu train_gpt_cpu_bf16; do [ -x ./$p ] || { bad "./$p is missing (make all)"; summary; exit 1; }; done
M="-e d2 --channels 64 --heads 2 -b 2 -t 32 -x 5 -v 2 -m 4 -s 0 -n 5"
run() { timeout 300 $MPIRUN -np 2 "$@" > /dev/null 2>&1 || bad "run failed: $*"; }
run ./train_gpt_cpu $M -z 0 -o "$tmp/z0"
run ./train_gpt_cpu $M -z 3 -o "$tmp/z3"
run ./train_gpt_cpu_bf16 $M -z 3 -o "$tmp/bf16"
run ./train_gpt_cpu $M -z 3 -n 2 -o "$tmp/z3n2"
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/z3" --expect-equal 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "train_loss .*5 steps 1..5.*bitwise equal" && echo "$out" | grep -q "model_00000005.bin: byte-identical" \
   && echo "$out" | grep -q "state_00000005.bin: byte-identical"; then ok "stage 0 vs stage 3: losses, model and state bitwise equal (--expect-equal: exit 0)"
else bad "stage 0 vs stage 3 (exit $rc): $out"; fi
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/bf16" --tol 2e-2 -o "$tmp/overlay.png" 2>&1); rc=$?
got=$(echo "$out" | awk '$1 == "train_loss" {for (i = 1; i <= NF; i++) if ($i == "rel") print $(i+2)}' | tr -d ,)
want=$(paste <(grep train_loss "$tmp/z3/main.log" | awk '{print $4}') <(grep train_loss "$tmp/bf16/main.log" | awk '{print $4}') |
       awk '{d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r} END {printf "%.3e", m}')
if [ $rc -eq 0 ] && [ -n "$got" ] && [ "$got" = "$want" ] && echo "$out" | grep -q "train_loss .*first differs at step"; then
  ok "fp32 vs bf16: max rel train-loss diff $got (computed here: $want), within 2e-2, not bitwise"
else bad "fp32 vs bf16 (exit $rc): printed '$got', computed '$want': $(echo "$out" | head -4)"; fi
if echo "$out" | grep -q "model_00000005.bin: differs" && echo "$out" | grep -Eq "^ +wte +max \|diff\| [0-9.e+-]+ \(max \|a\|"; then ok "fp32 vs bf16: the model's per-tensor differences are printed"
else bad "fp32 vs bf16: no per-tensor differences: $(echo "$out" | tail -5)"; fi
[ -s "$tmp/overlay.png" ] && head -c 8 "$tmp/overlay.png" | grep -q PNG && ok "the overlay picture is a PNG of $(stat -c %s "$tmp/overlay.png") bytes" || bad "no overlay picture"
$PY dev/compare_runs.py "$tmp/z3" "$tmp/bf16" --expect-equal > /dev/null 2>&1
[ $? -eq 1 ] && ok "fp32 vs bf16 --expect-equal: exit 1" || bad "fp32 vs bf16 --expect-equal did not exit 1"
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/nothing" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^error: .*nothing: no main.log" && ok "a run without main.log: one line, exit 1" ||
  bad "a run without main.log (exit $rc): $out"
# what only one run has, a NaN, another val set
for v in nan cut vt copy; do mkdir -p "$tmp/$v"; done
awk '$1 == "step" && $2 == 2 && $3 == "train_loss" { $4 = "-nan" } { print }' "$tmp/z0/main.log" > "$tmp/nan/main.log"
awk '$1 == "step" && $2 > 3 { exit } { print }' "$tmp/z0/main.log" > "$tmp/cut/main.log"
awk '$5 == "val_tokens" { $6 = $6 / 2 } { print }' "$tmp/z0/main.log" > "$tmp/vt/main.log"
cp "$tmp/z0/"* "$tmp/copy/"
grep -q "^step 2 train_loss -nan" "$tmp/nan/main.log" && [ "$(tail -1 "$tmp/cut/main.log" | awk '{print $2}')" = 3 ] \
  && grep -q "val_loss .* val_tokens 128$" "$tmp/z0/main.log" && grep -q "val_tokens 64$" "$tmp/vt/main.log" || bad "the edited logs are not what the checks below assume"
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/nan" --tol 0.01 2>&1); rc=$?
$PY dev/compare_runs.py "$tmp/z0" "$tmp/nan" --expect-equal > /dev/null 2>&1; rc2=$?
if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] && echo "$out" | grep -q "^  train_loss .*/nan is not finite at step 2 (-nan)" && echo "$out" | grep -q "^FAIL .*/nan: train_loss is -nan at step 2"
then ok "a loss of -nan at step 2: --tol 0.01 and --expect-equal exit 1, naming the step"
else bad "NaN run (exit $rc, $rc2): $out"; fi
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/cut" --expect-equal 2>&1); rc=$?
$PY dev/compare_runs.py "$tmp/z0" "$tmp/cut" --tol 0.01 > /dev/null 2>&1; rc2=$?
if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] && echo "$out" | grep -Eq "^  train_loss +2 steps only in .*/z0: 4..5$" \
   && echo "$out" | grep -q "^  checkpoints only in .*/z0: step 5 (not compared)$" && echo "$out" | grep -q "^FAIL .*train_loss logged at steps 4..5 only in"
then ok "a run cut after step 3 of 5: --expect-equal and --tol exit 1, naming steps 4..5 and the checkpoint at 5"
else bad "truncated run (exit $rc, $rc2): $out"; fi
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/vt" --tol 0.01 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "val_loss   over different val sets: 128 and 64 tokens at step 0"
then ok "val losses over another val set (val_tokens 128 vs 64): --tol exits 1, saying so"
else bad "val set (exit $rc): $out"; fi
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/copy" --tol 0 --expect-equal 2>&1); rc=$?
[ $rc -eq 0 ] && ! echo "$out" | grep -q "only in\|not finite\|FAIL" && ok "an identical copy: --tol 0 --expect-equal exit 0" || bad "identical copy (exit $rc): $out"
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/z3n2" --expect-equal 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "^  checkpoints only in .*/z3n2: steps 2, 4 (not compared)$" && echo "$out" | grep -q "state_00000005.bin: byte-identical"
then ok "extra checkpoints (-n 2 against -n 5): --expect-equal exits 0, naming steps 2, 4 as not compared"
else bad "extra checkpoints (exit $rc): $out"; fi
cp -r "$tmp/z3" "$tmp/nostate" && rm "$tmp/nostate/state_00000005.bin"
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/nostate" --expect-equal 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL .*/nostate: state_00000005.bin only in .*/z3$"
then ok "a run without the state_00000005.bin the other has: --expect-equal exits 1, naming it"
else bad "missing state (exit $rc): $out"; fi
cp -r "$tmp/z3" "$tmp/halfpair" && cp "$tmp/z3/model_00000005.bin" "$tmp/halfpair/model_00000003.bin"
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/halfpair" --expect-equal 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL .*/halfpair: model_00000003.bin without state_00000003.bin (an incomplete checkpoint)$"
then ok "an extra model_00000003.bin without its state: --expect-equal exits 1"
else bad "an extra model without its state (exit $rc): $out"; fi
# a state without its model (the model removed or never written) is half a pair too (issue 49 item 12)
cp -r "$tmp/z3n2" "$tmp/lonestate" && rm "$tmp/lonestate/model_00000004.bin"
out=$($PY dev/compare_runs.py "$tmp/z3" "$tmp/lonestate" --expect-equal 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL .*/lonestate: state_00000004.bin without model_00000004.bin (an incomplete checkpoint)$"
then ok "a run whose step-4 checkpoint has a state and no model: --expect-equal exits 1, naming it"
else bad "a state without its model (exit $rc): $out"; fi
cp -r "$tmp/z3" "$tmp/lonestate5" && rm "$tmp/lonestate5/model_00000005.bin" && cp -r "$tmp/z3" "$tmp/lonestate5b" && rm "$tmp/lonestate5b/model_00000005.bin"
out=$($PY dev/compare_runs.py "$tmp/lonestate5" "$tmp/lonestate5b" --expect-equal 2>&1); rc=$?
if [ $rc -eq 1 ] && [ "$(echo "$out" | grep -c "^FAIL .*/lonestate5b\?: state_00000005.bin without model_00000005.bin (an incomplete checkpoint)$")" = 2 ]
then ok "two runs whose only checkpoint step has the same state and no model: --expect-equal exits 1, naming both"
else bad "two lone states (exit $rc): $out"; fi
: > "$tmp/empty.log"; mkdir -p "$tmp/empty"; : > "$tmp/empty/main.log"
out=$($PY dev/compare_runs.py "$tmp/z0" "$tmp/empty" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^error: .*empty/main.log is empty" && ok "an empty main.log: one line, exit 1" ||
  bad "an empty main.log (exit $rc): $out"
summary
