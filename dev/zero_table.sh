#!/usr/bin/env bash
# The ZeRO table of the README: for a model (default d6: 6 layers, 6 heads,
# 384 channels, vocab 50304) with B=4, T=256 per rank, on N=2 and N=4 ranks
# of this machine, per stage: the model-state bytes per rank and the total
# allocated per rank (from the ledger, allocated == predicted), the peak of
# the stage-3 gathered units, the ring wire bytes per rank per optimizer step
# (every collective but the scalars)
# (counted on the collectives) and ms per step. A benchmark, not a test.
#   bash dev/zero_table.sh [STEPS] [extra trainer flags]
set -u
cd "$(dirname "$0")/.."
STEPS=${1:-4}; shift || true
EXTRA="$*"
MODEL=${MODEL:--e d6 -b 4 -t 256}
PROG=${PROG:-./train_gpt_cpu_bf16}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
echo "model: $MODEL, $PROG, $STEPS steps, $(nproc) cores ($(bash dev/cpu_name.sh))"
printf "| N | stage | model states / rank (MB) | total allocated / rank (MB) | gathered in use, peak (MB) | wire / rank / step (MB) | volume (Psi) | ms / step |\n"
printf "|---|---|---|---|---|---|---|---|\n"
for n in 2 4; do
  threads=$(( $(nproc) / n )); [ $threads -lt 1 ] && threads=1
  for mode in "0" "1" "2" "3 --reshard-after-forward 1" "3 --reshard-after-forward 0"; do
    out=$(OMP_NUM_THREADS=$threads $MPIRUN -np $n $PROG $MODEL -x $STEPS -v 0 -s 0 -z $mode $EXTRA 2>&1)
    ms=$(echo "$out" | awk '/= model states/{print $5; exit}')
    tot=$(echo "$out" | awk '/= total/{print $4; exit}')
    gat=$(echo "$out" | sed -n 's/.*gathered units in use at most \([0-9.]*\) MB.*/\1/p')
    wire=$(echo "$out" | awk '/^  (all-reduce|reduce-scatter|all-gather|embedding rows all-gather) /{s+=$(NF-1)} END{print s}')
    vol=$(echo "$out" | sed -n 's/.*volume per optimizer step: \([0-9.]*\) Psi.*/\1/p')
    step=$(echo "$out" | sed -n 's/^average \([0-9.]*\) ms.*/\1/p')
    label="$mode"; label=${label/ --reshard-after-forward /, reshard }
    awk -v n=$n -v l="$label" -v ms="$ms" -v tot="$tot" -v gat="${gat:-0}" -v wire="${wire:-0}" -v st=$STEPS -v vol="${vol:--}" -v step="${step:-?}" \
      'BEGIN{printf "| %d | %s | %.1f | %.1f | %s | %.1f | %s | %s |\n", n, l, ms/1e6, tot/1e6, gat, wire/st/1e6, vol, step}' 
  done
done
