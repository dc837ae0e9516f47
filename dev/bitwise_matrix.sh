#!/usr/bin/env bash
# dev/bitwise_matrix.sh: the checkpoint hashes of a fixed matrix of short
# training runs, one line per run ("<config>  <md5 of model>  <md5 of
# state>"), to show that a change which must not move numbers (a
# restructure, a speed-up that keeps the arithmetic) did not: run it before
# and after, and diff the two outputs.
#   bash dev/bitwise_matrix.sh > before.txt   (on the old commit, built)
#   bash dev/bitwise_matrix.sh > after.txt && diff before.txt after.txt
# The matrix: both CPU programs x stages 0-3 x N = 1..4 ranks; HSDP
# (--shard-group 2 at N = 4, stages 1 and 3); disk offload (N = 2, stages 1
# and 3); --keep-logits 1 (N = 1 stage 0, N = 2 stage 3); gradient
# accumulation (N = 2, stage 2, 2 micro-steps); and a resume (N = 2, stage
# 3: 3 steps, then -y 1 to 5; the hashes of step 5). A small model (d2,
# 64 channels, B=2, T=32; 3 steps), OMP_NUM_THREADS=1, so the figures
# depend only on the code and this CPU's ISA level (LLMC_CPU_ISA is passed
# through). About 2 minutes on 2 cores. PROGS="./train_gpt_cpu
# ./train_gpt_cpu_bf16" by default. Exit 1 if a run fails.
# Then the invariance section (--invariant 1, docs/design.md section 13;
# INVARIANCE=0 skips it): per program, one global batch (-d 256: 8
# sequences of 32 tokens) on N = 1, 2, 4 ranks (B = 8, 4, 2) and with
# accumulation (N = 1 B = 2 x 4 micro-steps, N = 2 B = 1 x 4), every stage:
# one line per run as above, then "invariance <prog>: all K runs equal" or
# "invariance <prog>: NOT EQUAL" (exit 1) after comparing every model and
# state with cmp. About 3 more minutes.
set -u
cd "$(dirname "$0")/.."
PROGS=${PROGS:-"./train_gpt_cpu ./train_gpt_cpu_bf16"}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMP_NUM_THREADS=1
MODEL="-e d2 --channels 64 --heads 2 -b 2 -t 32 -v 0 -s 0 --seed 7"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0
hash_run() { # label np steps args...
  local label=$1 np=$2 steps=$3; shift 3
  local out=$tmp/run
  rm -rf "$out"
  if ! timeout 300 $MPIRUN -np "$np" "$@" -x "$steps" -o "$out" > "$tmp/log" 2>&1; then
    echo "$label  FAILED: $(grep -m1 error "$tmp/log")"; rc=1; return
  fi
  local s; s=$(printf "%08d" "$steps")
  echo "$label  $(md5sum < "$out/model_$s.bin" | cut -c1-32)  $(md5sum < "$out/state_$s.bin" | cut -c1-32)"
}
for prog in $PROGS; do
  p=$(basename "$prog")
  for n in 1 2 3 4; do
    for z in 0 1 2 3; do hash_run "$p N=$n z$z" $n 3 "$prog" $MODEL -z $z; done
  done
  for z in 1 3; do hash_run "$p N=4 z$z --shard-group 2" 4 3 "$prog" $MODEL -z $z --shard-group 2; done
  mkdir -p "$tmp/off"
  for z in 1 3; do hash_run "$p N=2 z$z --offload-optimizer disk" 2 3 "$prog" $MODEL -z $z --offload-optimizer "disk:$tmp/off"; done
  hash_run "$p N=1 z0 --keep-logits 1" 1 3 "$prog" $MODEL -z 0 --keep-logits 1
  hash_run "$p N=2 z3 --keep-logits 1" 2 3 "$prog" $MODEL -z 3 --keep-logits 1
  hash_run "$p N=2 z2 accumulation 2" 2 3 "$prog" $MODEL -z 2 -d 256
  # resume: 3 steps, then continue to 5 in the same directory
  rm -rf "$tmp/res"
  if timeout 300 $MPIRUN -np 2 "$prog" $MODEL -z 3 -x 3 -o "$tmp/res" > "$tmp/log" 2>&1 &&
     timeout 300 $MPIRUN -np 2 "$prog" $MODEL -z 3 -x 5 -y 1 -o "$tmp/res" > "$tmp/log" 2>&1; then
    echo "$p N=2 z3 resume 3->5  $(md5sum < "$tmp/res/model_00000005.bin" | cut -c1-32)  $(md5sum < "$tmp/res/state_00000005.bin" | cut -c1-32)"
  else
    echo "$p N=2 z3 resume 3->5  FAILED: $(grep -m1 error "$tmp/log")"; rc=1
  fi
done
if [ "${INVARIANCE:-1}" = 1 ]; then
  for prog in $PROGS; do
    p=$(basename "$prog"); ref=""; n_eq=0; n_all=0
    for lay in "1 8" "2 4" "4 2" "1 2" "2 1"; do
      set -- $lay; np=$1; b=$2
      for z in 0 1 2 3; do
        out=$tmp/inv-$np-$b-$z; rm -rf "$out"
        if ! timeout 300 $MPIRUN -np "$np" "$prog" -e d2 --channels 64 --heads 2 -t 32 -v 0 -s 0 --seed 7 -d 256 -b "$b" -z "$z" \
             --invariant 1 -x 3 -o "$out" > "$tmp/log" 2>&1; then
          echo "$p --invariant 1 N=$np B=$b z$z  FAILED: $(grep -m1 error "$tmp/log")"; rc=1; continue
        fi
        echo "$p --invariant 1 N=$np B=$b A=$((8 / np / b)) z$z  $(md5sum < "$out/model_00000003.bin" | cut -c1-32)  $(md5sum < "$out/state_00000003.bin" | cut -c1-32)"
        n_all=$((n_all + 1))
        if [ -z "$ref" ]; then ref=$out; n_eq=1; continue; fi
        cmp -s "$ref/model_00000003.bin" "$out/model_00000003.bin" && cmp -s "$ref/state_00000003.bin" "$out/state_00000003.bin" && n_eq=$((n_eq + 1))
        [ "$out" != "$ref" ] && rm -rf "$out"
      done
    done
    if [ "$n_eq" = "$n_all" ] && [ "$n_all" = 20 ]; then echo "invariance $p: all $n_all runs equal (cmp of every model and state)"
    else echo "invariance $p: NOT EQUAL ($n_eq of $n_all runs equal the first; 20 expected)"; rc=1; fi
  done
fi
exit $rc
