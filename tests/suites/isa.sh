#!/usr/bin/env bash
# Every ISA level this CPU can run (llmc/cpu/isa.h: avx2, avx512,
# avx512_bf16, amx; LLMC_CPU_ISA caps the level), so that every machine
# tests the paths that AVX2-only machines run, and levels above this CPU
# are skipped and counted (never passed):
#   per level L up to this CPU's, with LLMC_CPU_ISA=L:
#     - the start-up line says "level L";
#     - the fp32 and bf16 test programs pass the float64 PyTorch reference
#       (odd config: 1 rank stage 0, 2 ranks stage 3) with their tolerances;
#     - a short training run (2 ranks, 3 steps) gives bitwise the same
#       checkpoint at stage 0 and stage 3, in both programs;
#   across levels (where the design says the same code runs):
#     - fp32 program: avx512, avx512_bf16 and amx run the same sgemm
#       kernels (AVX-512 FMA): checkpoints bitwise equal; avx2 runs oneDNN's
#       AVX2 kernels, whose K blocking differs: its losses are compared with
#       the avx512 run's within the bound both meet against the reference;
#     - bf16 program (LLMC_BF16_MATMUL=fp32: its fp32-copy path at every
#       level): avx512 and avx512_bf16 multiply on fp32 copies with the
#       same sgemm: bitwise equal;
#     - from avx512 up, the bf16 test program with LLMC_BF16_MATMUL=primitive
#       (oneDNN's bf16 primitive, every class) passes the same reference;
#   errors: LLMC_BF16_MATMUL=primitive at avx2 and a bad LLMC_CPU_ISA end
#   both ranks with one error line naming the variable, exit 1.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in train_gpt_cpu train_gpt_cpu_bf16 test_gpt_cpu test_gpt_cpu_bf16; do
  [ -x ./$p ] || { bad "./$p is missing (make all)"; summary; exit 1; }
done
[ -f data/ref/odd_model.bin ] || { bad "data/ref/odd_model.bin is missing (make ref)"; summary; exit 1; }
detected=$(cpu_isa_detected) || { bad "cpu_isa: $detected"; summary; exit 1; }
echo "this CPU: $(bash dev/cpu_name.sh), detected level $detected"
MODEL="-e d2 --channels 64 --heads 2 -b 2 -t 32 -v 0 -s 0"
REF="-e data/ref/odd_model.bin -s data/ref/odd_debug_state.bin"
ran=""
for L in $CPU_ISA_ALL; do
  if ! why=$(cpu_isa_can "$L"); then
    skip "level $L: reference checks, stage equality, both programs: $why"
    continue
  fi
  ran="$ran $L"
  for prog in test_gpt_cpu test_gpt_cpu_bf16; do
    for run in "1 -z 0" "2 -z 3"; do
      n=${run%% *}; z=${run#* }
      if LLMC_CPU_ISA=$L timeout 300 $MPIRUN -np "$n" ./$prog $REF $z > "$tmp/out" 2>&1 && grep -q " 0 failed" "$tmp/out"; then
        ok "level $L: $prog N=$n $z passes the reference ($(tail -1 "$tmp/out"))"
      else
        bad "level $L: $prog N=$n $z: $(grep -m3 -E 'FAIL|error' "$tmp/out" | tr '\n' ' ')"
      fi
    done
    grep -q "cpu: .*level $L " "$tmp/out" && ok "level $L: $prog's start-up line says level $L" || bad "level $L: $prog does not say level $L: $(grep 'cpu:' "$tmp/out")"
  done
  # the bf16 program's other path, oneDNN's bf16 primitive for every class,
  # against the same reference at every level that has it (avx512 and up;
  # oneDNN 2.6 has no bf16 matmul below avx512_core: tested as an error below)
  if [ "$L" != avx2 ]; then
    for run in "1 -z 0" "2 -z 3"; do
      n=${run%% *}; z=${run#* }
      if LLMC_BF16_MATMUL=primitive LLMC_CPU_ISA=$L timeout 300 $MPIRUN -np "$n" ./test_gpt_cpu_bf16 $REF $z > "$tmp/out" 2>&1 && grep -q " 0 failed" "$tmp/out" &&
         grep -q "^ *matmul: oneDNN's bf16 matmul primitive" "$tmp/out"; then
        ok "level $L: test_gpt_cpu_bf16 N=$n $z with LLMC_BF16_MATMUL=primitive passes the reference ($(tail -1 "$tmp/out"); $(grep -m1 -o 'implementation [^,]*' "$tmp/out"))"
      else
        bad "level $L: test_gpt_cpu_bf16 N=$n $z with LLMC_BF16_MATMUL=primitive: $(grep -m3 -E 'FAIL|error|^matmul' "$tmp/out" | tr '\n' ' ')"
      fi
    done
  fi
  # the bf16 program on its fp32-copy path at every level, so that the
  # levels compare (its measured choice of paths per class is tested in
  # tests/suites/matmul_choice.sh)
  for prog in train_gpt_cpu train_gpt_cpu_bf16; do
    for z in 0 3; do
      if LLMC_BF16_MATMUL=fp32 LLMC_CPU_ISA=$L timeout 300 $MPIRUN -np 2 ./$prog $MODEL -z $z -x 3 -o "$tmp/$prog.$L.z$z" > "$tmp/log.$prog.$L.z$z" 2>&1; then :
      else bad "level $L: $prog -z $z failed: $(grep -m2 error "$tmp/log.$prog.$L.z$z")"; fi
    done
    a=$tmp/$prog.$L.z0/model_00000003.bin; b=$tmp/$prog.$L.z3/model_00000003.bin
    if [ -f "$a" ] && cmp -s "$a" "$b"; then ok "level $L: $prog stages 0 and 3 bitwise equal ($(md5sum < "$a" | cut -c1-12))"
    else bad "level $L: $prog stages 0 and 3 differ (or a run failed)"; fi
  done
done

# across levels
md5() { md5sum < "$1" 2>/dev/null | cut -c1-32; }
same_levels() { # prog levels...: bitwise equal checkpoints at every given level that ran
  local prog=$1; shift; local have=() L
  for L in "$@"; do case " $ran " in *" $L "*) have+=("$L") ;; esac; done
  if [ ${#have[@]} -lt 2 ]; then skip "$prog: levels $* bitwise equal: skipped (needs two of them; this CPU: $detected)"; return; fi
  local h0; h0=$(md5 "$tmp/$prog.${have[0]}.z0/model_00000003.bin")
  for L in "${have[@]:1}"; do
    if [ "$(md5 "$tmp/$prog.$L.z0/model_00000003.bin")" = "$h0" ]; then ok "$prog: level $L bitwise equal to level ${have[0]}"
    else bad "$prog: level $L differs from level ${have[0]} (the same kernels should run there)"; fi
  done
}
same_levels train_gpt_cpu avx512 avx512_bf16 amx
same_levels train_gpt_cpu_bf16 avx512 avx512_bf16
# avx2 against avx512, fp32 program: the sgemm's summation order differs.
# Bound: each level passes the reference above within 1e-4 relative on the
# step losses, so two levels are within 2e-4 of each other; report the gap.
if case " $ran " in *" avx2 "*) case " $ran " in *" avx512 "*) true ;; *) false ;; esac ;; *) false ;; esac; then
  gap=$(paste <(grep -o 'loss [0-9.]*' "$tmp/log.train_gpt_cpu.avx2.z0") <(grep -o 'loss [0-9.]*' "$tmp/log.train_gpt_cpu.avx512.z0") |
        awk '{d = $2 - $4; if (d < 0) d = -d; r = d / $4; if (r > m) m = r} END {printf "%.3g", m + 0}')
  same=$(cmp -s "$tmp/train_gpt_cpu.avx2.z0/model_00000003.bin" "$tmp/train_gpt_cpu.avx512.z0/model_00000003.bin" && echo "bitwise equal" || echo "not bitwise equal: oneDNN's AVX2 and AVX-512 sgemm kernels sum in different orders")
  if awk -v g="$gap" 'BEGIN {exit !(g <= 2e-4)}'; then ok "train_gpt_cpu: avx2 vs avx512: largest relative difference of the printed step losses $gap (bound 2e-4), checkpoints $same"
  else bad "train_gpt_cpu: avx2 vs avx512: step losses differ by $gap relative (bound 2e-4)"; fi
else
  skip "train_gpt_cpu avx2 vs avx512: skipped (needs AVX512_CORE; this CPU: ${detected^^})"
fi

# errors on every rank
out=$(LLMC_CPU_ISA=avx2 LLMC_BF16_MATMUL=primitive timeout 60 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1); rc=$?
n=$(echo "$out" | grep -c "^error: LLMC_BF16_MATMUL=primitive: oneDNN's bf16 matmul primitive needs AVX512_CORE")
[ $rc -ne 0 ] && [ "$n" -ge 1 ] && ! echo "$out" | grep -q "status 3" && ok "LLMC_BF16_MATMUL=primitive at avx2: one error naming AVX512_CORE, exit $rc" ||
  bad "LLMC_BF16_MATMUL=primitive at avx2: rc $rc, output: $(echo "$out" | head -3)"
out=$(LLMC_CPU_ISA=avx3 timeout 60 $MPIRUN -np 2 ./train_gpt_cpu $MODEL -x 1 2>&1); rc=$?
echo "$out" | grep -q "^error: LLMC_CPU_ISA=avx3: must be one of avx2, avx512, avx512_bf16, amx" && [ $rc -ne 0 ] &&
  ok "LLMC_CPU_ISA=avx3: one error line, exit $rc" || bad "LLMC_CPU_ISA=avx3: rc $rc: $(echo "$out" | head -3)"
summary
