#!/usr/bin/env bash
# Each stage saves memory on the models people run (issue "Stage 3 must save
# memory"): on a small GPT-2-vocabulary model (embedding-dominated: make
# train's d2 at T = 64), for N = 2 and 4 ranks, the per-rank peak of the ledger (its
# "= total" row: every buffer is allocated at start, so the total is the
# peak) strictly decreases from stage 0 to 1 to 2 to 3, and at N = 4 stage 3
# needs at most 60% of stage 0. In every program built (fp32, and bf16 when
# ./train_gpt_cpu_bf16 exists). The trainer itself checks allocated ==
# predicted (exit 2 otherwise).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
# (--keep-logits 0: the LM head's one chunk of logits, as docs/stages.md's
# table; the default keeps all B*T*Vp where they fit, the same in every
# stage, ZeRO shards none of the activations)
MODEL="-e d2 --channels 128 --heads 2 -b 4 -t 64 --keep-logits 0"
progs="./train_gpt_cpu"; [ -x ./train_gpt_cpu_bf16 ] && progs="$progs ./train_gpt_cpu_bf16"
for prog in $progs; do
  for n in 2 4; do
    totals=()
    for z in 0 1 2 3; do
      t=$(timeout 120 $MPIRUN -np $n $prog $MODEL -x 1 -v 0 -s 0 -z $z 2>&1 | awk '/^  = total/{print $3; exit}')
      totals+=("${t:-0}")
    done
    if [ "${totals[0]}" -gt "${totals[1]}" ] && [ "${totals[1]}" -gt "${totals[2]}" ] && [ "${totals[2]}" -gt "${totals[3]}" ] && [ "${totals[3]}" -gt 0 ]; then
      ok "$prog N=$n: peak per rank falls stage by stage: ${totals[*]} bytes"
    else bad "$prog N=$n: peaks ${totals[*]} do not fall strictly from stage 0 to 3"; fi
    if [ $n = 4 ]; then
      if [ $((totals[3] * 10)) -le $((totals[0] * 6)) ]; then ok "$prog N=4: stage 3 needs $((100 * totals[3] / totals[0]))% of stage 0 (<= 60%)"
      else bad "$prog N=4: stage 3 needs $((100 * totals[3] / totals[0]))% of stage 0 (> 60%)"; fi
    fi
  done
done
summary
