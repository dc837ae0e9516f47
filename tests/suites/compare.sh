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
#     main.log) is one error line, exit 1.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in train_gpt_cpu train_gpt_cpu_bf16; do [ -x ./$p ] || { bad "./$p is missing (make all)"; summary; exit 1; }; done
M="-e d2 --channels 64 --heads 2 -b 2 -t 32 -x 5 -v 2 -m 2 -s 0 -n 5"
run() { timeout 300 $MPIRUN -np 2 "$@" > /dev/null 2>&1 || bad "run failed: $*"; }
run ./train_gpt_cpu $M -z 0 -o "$tmp/z0"
run ./train_gpt_cpu $M -z 3 -o "$tmp/z3"
run ./train_gpt_cpu_bf16 $M -z 3 -o "$tmp/bf16"
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
summary
