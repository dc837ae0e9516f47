#!/usr/bin/env bash
# zeropp_accuracy.sh (make zeropp-accuracy): what ZeRO++'s quantization
# costs in accuracy, measured on make train's run (its program, model, 2
# ranks, STEPS=1700 steps, val every 300):
#   plain   -z 3                                         (the reference)
#   zero++  -z 3 --quantize-weights int8 --quantize-grads QG
#   seed    -z 3 --seed 1338                             (run-to-run noise: another
#                                                          init and data order)
# then dev/compare_runs.py of zero++ and of seed against plain (the largest
# train and val loss differences, the last val losses) and one picture of the
# curves (PLOT). hpZ is left out: it changes no number (tests/suites/zeropp.sh).
# A benchmark, not a test: about 3 x STEPS x 0.2 s on 2 cores.
# Environment: STEPS (1700), QG (int4), PROG (./train_gpt_cpu_bf16),
# OUT (build/zeropp_accuracy), PLOT (OUT/loss.png).
set -u
cd "$(dirname "$0")/.." || exit 1
PROG=${PROG:-./train_gpt_cpu_bf16}
STEPS=${STEPS:-1700}
QG=${QG:-int4}
OUT=${OUT:-build/zeropp_accuracy}
PLOT=${PLOT:-$OUT/loss.png}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
[ -x "$PROG" ] || { echo "error: zeropp_accuracy.sh: $PROG not built (make all)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
cpu=$(bash dev/cpu_name.sh); isa=$(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "zeropp_accuracy: $PROG, 2 ranks, $STEPS steps; CPU: $cpu, $(nproc) cores (${isa:-no AVX-512/AMX})"
runs=("plain|-z 3" "zero++|-z 3 --quantize-weights int8 --quantize-grads $QG" "seed|-z 3 --seed 1338")
for r in "${runs[@]}"; do
  name=${r%%|*}; flags=${r#*|}
  t0=$(date +%s)
  rm -rf "$OUT/$name"   # a rerun starts over (the trainer refuses a fresh run into an -o holding checkpoints)
  $MPIRUN -np 2 "$PROG" -x "$STEPS" $flags -o "$OUT/$name" > "$OUT/$name.log" 2>&1 || { echo "error: the $name run failed (see $OUT/$name.log)" >&2; exit 1; }
  echo "  $name ($flags): $(grep '^val loss' "$OUT/$name.log" | tail -1), $(( $(date +%s) - t0 )) s; $(grep -m1 '^average' "$OUT/$name.log" | cut -d, -f1)"
done
echo
echo "== zero++ against plain"
/usr/bin/python3 dev/compare_runs.py "$OUT/plain" "$OUT/zero++" -o "$PLOT" | grep -v "^  model\|^  state\|^    "
echo
echo "== another seed against plain (the noise)"
/usr/bin/python3 dev/compare_runs.py "$OUT/plain" "$OUT/seed" | grep -v "^  model\|^  state\|^    "
echo "picture: $PLOT"
