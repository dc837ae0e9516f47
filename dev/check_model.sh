#!/usr/bin/env bash
# dev/check_model.sh CKPT [VAL_GLOB] [trainer flags...]: a checkpoint's val
# loss from the trainer (-x 0 on NP ranks) and from the float64 PyTorch
# reference (dev/reference.py --eval) over the same val tokens, and their
# relative difference against the bound. The program is the one that
# trained the checkpoint: PROGRAM when given, else the last start before the
# checkpoint's step in runs.txt beside it, else the file's version (3:
# ./train_gpt_cpu, 5: ./train_gpt_cpu_bf16). The bound: 1e-5 for
# ./train_gpt_cpu; reference.py's BF16_K / sqrt(tokens) for
# ./train_gpt_cpu_bf16 (a version-3 file's weights rounded to bf16 in the
# reference, as that program computes with them: --trainer-dtype). Exit 0
# within the bound, 1 beyond it or on bad input. The flags go to the
# trainer, and -b -t -m (the trainer's defaults otherwise) to both. `make check-model CKPT=...
# DATA=... [VAL_ARGS="-b 4 -t 128 -m 80"] [NP=2] [PROGRAM=./train_gpt_cpu_bf16]` runs it.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 CKPT [VAL_GLOB] [-b B -t T -m M]" >&2; exit 1; }
ck=$1; shift
glob="data/brown/brown_val_*.bin"
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then glob=$1; shift; fi
[ -f "$ck" ] || { echo "error: check-model: CKPT=$ck: no such file" >&2; exit 1; }
v=$(od -An -t d4 -j 4 -N 4 "$ck" | tr -d ' ')
case "$v" in
  3) prog=./train_gpt_cpu ;;
  5) prog=./train_gpt_cpu_bf16 ;;
  *) echo "error: check-model: $ck: header version '$v', expected 3 (fp32) or 5 (bf16) (an llm.c model file)" >&2; exit 1 ;;
esac
how="the file's version $v"
# the program that trained it: runs.txt beside the checkpoint (the last start before its step), unless PROGRAM is given
runs="$(dirname "$ck")/runs.txt"
s=$(basename "$ck" | sed -n 's/^model_0*\([0-9][0-9]*\)\.bin$/\1/p')
if [ -n "${PROGRAM:-}" ]; then prog=$PROGRAM; how="PROGRAM"
elif [ -n "$s" ] && [ -f "$runs" ]; then
  p=$(awk -v s="$s" '$1 == "start" && $2 == "step" && ($3 + 0) < s + 0 { for (i = 4; i < NF; i++) if ($i == "program") last = $(i + 1) } END { print last }' "$runs")
  [ -n "$p" ] && { prog=$p; how="$runs"; }
fi
case "$prog" in
  *train_gpt_cpu_bf16) dtype=bf16 ;;
  *train_gpt_cpu) dtype=fp32 ;;
  *) echo "error: check-model: PROGRAM=$prog: expected ./train_gpt_cpu or ./train_gpt_cpu_bf16 (the CPU programs)" >&2; exit 1 ;;
esac
[ -x "$prog" ] || { echo "error: check-model: $prog is missing (make all)" >&2; exit 1; }
MPIRUN=${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none}
set -f
out=$($MPIRUN -np "${NP:-2}" $prog -e "$ck" -x 0 -s 0 -j "$glob" "$@" 2>&1 < /dev/null)
rc=$?
line=$(echo "$out" | grep "^val loss")
if [ $rc -ne 0 ] || [ -z "$line" ]; then echo "$out" | grep -m1 "error" >&2 || echo "error: check-model: $prog exited $rc" >&2; exit 1; fi
echo "$prog on ${NP:-2} ranks: $line (the program from $how)"
ref=()   # -b -t -m go to the reference too; the trainer's other flags (e.g. --collective-timeout) only to the trainer
while [ $# -gt 0 ]; do
  case "$1" in -b|-t|-m) ref+=("$1" "${2:-}"); shift 2 ;; *) shift ;; esac
done
exec /usr/bin/python3 dev/reference.py --eval "$ck" -j "$glob" "${ref[@]}" --trainer-dtype $dtype --expect "$(echo "$line" | awk '{print $3}')"
