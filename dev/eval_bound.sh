#!/usr/bin/env bash
# dev/eval_bound.sh: how far the trainers' -x 0 val loss is from the float64
# PyTorch reference (dev/reference.py --eval) on checkpoints of this
# project, fp32 (version 3) and bf16 (version 5): the measurement behind
# reference.py's bounds (FP32_RTOL, BF16_K; docs/resume.md).
# For each model (d2 as make train trains it, d2 with 64 channels, d6, two
# seeds, 0 to 200 steps), trained by the bf16 program on 2 ranks with
# --checkpoint-dtype bf16 and by the fp32 program, it prints per checkpoint
# and val setting (-b 4 -t 64 -m 40: 2560 tokens, -b 4 -t 128 -m 80:
# 10240, -b 1 -t 32 -m 2: 64) the reference's loss, the fp32 program's at
# 1 and 2 ranks and the bf16 program's at 1 and 2 ranks, and their
# relative differences from the reference. Last lines: the largest
# relative difference of each program and file kind, over all val sets and
# over the 64-token one. About an hour on 2 shared cores (most of it the
# training). OUT=DIR keeps the runs (default: a temp dir); a checkpoint
# already in OUT is evaluated again, not retrained. VALS="-b 4 -t 64 -m 20|..."
# replaces the val sets, FILES="bf16" evaluates only the bf16 runs' files.
set -u
cd "$(dirname "$0")/.."
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
: > "$OUT/rels"
val() { # np prog ckpt -b B -t T -m M: the val loss printed by -x 0
  local np=$1 prog=$2 ck=$3; shift 3
  $MPIRUN -np "$np" "$prog" -e "$ck" -x 0 -s 0 -v 1 "$@" < /dev/null 2>&1 | awk '/^val loss/ {print $3}'
}
rel() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.2e", d / b }'; }
printf "%-34s %-10s %-16s %-10s %-21s %-21s %-21s %-21s\n" checkpoint file val reference "fp32 N=1 (rel)" "fp32 N=2 (rel)" "bf16 N=1 (rel)" "bf16 N=2 (rel)"
while read -r name steps args; do
  for prog in train_gpt_cpu train_gpt_cpu_bf16; do
    d="$OUT/$name.$prog"; dt=$([ $prog = train_gpt_cpu ] && echo fp32 || echo bf16)
    case " ${FILES:-fp32 bf16} " in *" $dt "*) ;; *) continue ;; esac
    ck="$d/model_$(printf %08d "$steps").bin"
    [ -f "$ck" ] || $MPIRUN -np 2 ./$prog $args -x "$steps" -v 0 -s 0 -l 3e-3 -u 5 --checkpoint-dtype $dt --collective-timeout 0 -o "$d" < /dev/null > "$d.log" 2>&1 ||
      { echo "$name $prog: training failed: $(grep -m1 error "$d.log")"; continue; }
    IFS='|' read -r -a vals <<< "${VALS:--b 4 -t 64 -m 40|-b 4 -t 128 -m 80|-b 1 -t 32 -m 2}"
    for v in "${vals[@]}"; do
      ref=$(/usr/bin/python3 dev/reference.py --eval "$ck" $v < /dev/null | awk '/^val loss/ {print $3}')
      line=$(printf "%-34s %-10s %-16s %-10s" "$name/$steps steps" "$dt" "$(echo $v | tr -d ' ')" "$ref")
      for p in train_gpt_cpu train_gpt_cpu_bf16; do for np in 1 2; do
        x=$(val $np ./$p "$ck" $v)
        line="$line $(printf "%-21s" "$x ($(rel "$x" "$ref"))")"
        echo "$dt ${p#./} $(rel "$x" "$ref") $(echo $v | tr -d ' ')" >> "$OUT/rels"
      done; done
      echo "$line"
    done
  done
done <<'CFG'
d2 1 -e d2 -b 4 -t 128
d2 20 -e d2 -b 4 -t 128
d2 200 -e d2 -b 4 -t 128
d2-seed7 50 -e d2 -b 4 -t 128 --seed 7
d2-c64 100 -e d2 --channels 64 -b 4 -t 64
d6 20 -e d6 -b 2 -t 128
d2-t64 20 -e d2 -b 4 -t 64
CFG
echo
awk '{ k = $1 " file, " ($2 == "train_gpt_cpu" ? "fp32" : "bf16") " program"; r = $3 + 0
       if (!(k in m) || r > m[k]) m[k] = r; if ($4 == "-b1-t32-m2" && (!(k in s) || r > s[k])) s[k] = r }
     END { for (k in m) printf "largest relative difference from the reference: %s: %.2e over every val set, %.2e over 64 tokens\n", k, m[k], s[k] }' "$OUT/rels" | sort
# the bf16 program's error on bf16 files is a mean of per-token rounding
# errors: relative difference x sqrt(tokens) is about constant; its
# largest and rms value are what reference.py's BF16_K is set from
awk '$1 == "bf16" && $2 == "train_gpt_cpu_bf16" { split($4, f, /-[btm]/); c = $3 * sqrt(f[2] * f[3] * f[4]); q += c * c; k++; if (c > m) m = c }
     END { printf "bf16 file, bf16 program: relative difference x sqrt(tokens): largest %.2e, rms %.2e over %d runs\n", m, sqrt(q / k), k }' "$OUT/rels"
