#!/usr/bin/env bash
# The bf16 program's matmul paths, chosen by measurement per shape class
# (llmc/cpu/matmul_choice.h), end to end through the trainer:
#   - --calibrate-matmul writes a complete calibration file for this CPU
#     (at avx2: every class fp32, the primitive unavailable);
#   - a run reading it: the start-up line names the path of every class,
#     the rates that decided it and the file (at avx2: "primitive:
#     unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE)"); runs.txt
#     records the paths and how they were decided;
#   - ranks with different LLMC_BF16_MATMUL: one error naming
#     bf16_matmul_env before anything runs (the choice is agreed, never
#     per rank);
#   - a file for another CPU: not used (avx2: said; avx512 and above:
#     rank 0 measures at start-up and writes the file of this CPU);
#   - avx512 and above: a per-class mix of paths (LLMC_BF16_MATMUL_RATES,
#     the test hook) passes the float64 reference and keeps stages 0 and
#     3 bitwise equal; LLMC_BF16_MATMUL=primitive names oneDNN's
#     implementation and ISA, never AMX below amx;
#   - rank 0's start-up work alone (the measurement of a missing file, -z
#     auto's enumeration) does not trip a short --collective-timeout (5 s):
#     the others wait under a bound sized to that work and say what rank 0
#     is doing (the test hook LLMC_TEST_SLOW_START_S on every CPU; a real
#     measurement at avx512 and above);
#   - the calibration is part of the run's identity: a file of another
#     thread count is used with a line saying so where there is nothing to
#     choose (avx2), measured again where there is (the calibrated file
#     kept); a start-up measurement is "provisional 1", said on the line,
#     and --calibrate-matmul replaces it; the state records the paths
#     (header word 26) and a resume that meets other paths says so.
# Checks that need AVX-512 are skipped and counted on a CPU without it.
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
export OMP_NUM_THREADS=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for p in train_gpt_cpu_bf16 test_gpt_cpu_bf16; do
  [ -x ./$p ] || { bad "./$p is missing (make all)"; summary; exit 1; }
done
detected=$(cpu_isa_detected) || { bad "cpu_isa: $detected"; summary; exit 1; }
# Every check here is about the detected level's own calibration file and the caps below it
# (section 5 sets LLMC_CPU_ISA itself); under an outer cap (LLMC_CPU_ISA=avx2 make test) the
# programs run at the cap while this CPU's file and level are the detected ones: skipped, counted
level=$("$(cpu_isa_tool)" | awk '$1 == "level" {print $2}') || { bad "cpu_isa: $level"; summary; exit 1; }
if [ "$level" != "$detected" ]; then
  skip "bf16 matmul paths: LLMC_CPU_ISA=${LLMC_CPU_ISA:-} caps this run at $level; the suite checks the detected level's ($detected) calibration and caps below it (run it without LLMC_CPU_ISA)"
  summary; exit 0
fi
MODEL="-e d2 --channels 64 --heads 2 -b 2 -t 32 -v 0 -s 0"
REF="-e data/ref/odd_model.bin -s data/ref/odd_debug_state.bin"
cal=$tmp/cal.matmul
export LLMC_BF16_MATMUL_FILE=$cal
avx512=1; why=$(cpu_isa_can avx512) || avx512=0

# 1. the calibration
if timeout 600 ./train_gpt_cpu_bf16 --calibrate-matmul > "$tmp/cal.out" 2>&1 && [ -f "$cal" ]; then
  n=$(grep -c '^class ' "$cal")
  # the CPU as the trainer names it (the CPUID brand; /proc/cpuinfo's model name may differ: "AMD EPYC" on a Zen 5 VM)
  [ "$n" = 7 ] && grep -qxF "cpu $(cpu_isa_model)" "$cal" && grep -q "^level $detected$" "$cal" &&
    ok "--calibrate-matmul: 7 classes, this CPU and level ($(tail -1 "$tmp/cal.out" | cut -c1-160)...)" ||
    bad "--calibrate-matmul: file incomplete: $(cat "$cal")"
  if [ $avx512 = 0 ]; then
    awk '$1 == "class" && ($3 != 0 || $4 <= 0 || $5 != "fp32") {b = 1} END {exit b}' "$cal" && grep -q "unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE)" "$cal" &&
      ok "--calibrate-matmul at $detected: every class fp32, its rate measured, the primitive unavailable" ||
      bad "--calibrate-matmul at $detected: $(grep '^class' "$cal" | tr '\n' ' ')"
  else
    awk '$1 == "class" && ($3 <= 0 || $4 <= 0) {b = 1} END {exit b}' "$cal" &&
      awk '$1 == "class" {p = $3 > $4 * 1.02 ? "primitive" : "fp32"; if (p != $5) b = 1} END {exit b}' "$cal" &&
      ok "--calibrate-matmul at $detected: both paths measured per class, each class takes the faster (2% band): $(awk '$1 == "class" {printf "%s %s ", $2, $5}' "$cal")" ||
      bad "--calibrate-matmul at $detected: $(grep '^class' "$cal" | tr '\n' ' ')"
  fi
else
  bad "--calibrate-matmul failed: $(tail -3 "$tmp/cal.out")"
fi

cp "$cal" "$tmp/cal.good" 2>/dev/null
grep -q "^provisional 0$" "$cal" && ok "--calibrate-matmul writes 'provisional 0' (a calibration, not a start-up measurement)" || bad "--calibrate-matmul: no 'provisional 0' line"

# 2. a run reading it: the start-up line, runs.txt
if timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 2 -o "$tmp/run" > "$tmp/run.out" 2>&1; then
  line=$(grep '^matmul:' "$tmp/run.out")
  if [ $avx512 = 0 ]; then
    echo "$line" | grep -q "every class; primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE); GFLOP/s of the fp32 path, 1 thread: fwd [0-9]" &&
      echo "$line" | grep -q "($cal)" && ok "start-up line at $detected: fp32 for every class, the primitive unavailable, the calibrated rates, the file" ||
      bad "start-up line: $line"
  else
    echo "$line" | grep -q "GFLOP/s primitive/fp32, .*fwd \(fp32\|primitive\) [0-9]*/[0-9]" && echo "$line" | grep -q "($cal)" &&
      ok "start-up line at $detected: the path and both rates of every class, the file" || bad "start-up line: $line"
  fi
  if [ -z "$line" ]; then bad "no 'matmul:' line at start-up: nothing to check for AMX"
  elif echo "$line" | grep -qi "amx" && [ "$detected" != amx ]; then bad "start-up line names AMX on a CPU without it: $line"
  else ok "start-up line names no AMX below amx"; fi
  grep -q "bf16_matmul fwd:[a-z0-9]*,dinp:[a-z0-9]*,dweight:[a-z0-9]*,lm_fwd:[a-z0-9]*,lm_dinp:[a-z0-9]*,lm_dweight:[a-z0-9]*,attention:[a-z0-9]* bf16_matmul_by \(calibration-file\|primitive-unavailable\) bf16_matmul_env -" "$tmp/run/runs.txt" &&
    ok "runs.txt records the paths of every class and how they were decided" || bad "runs.txt: $(cat "$tmp/run/runs.txt")"
else
  bad "run with the calibration file failed: $(grep -m3 error "$tmp/run.out")"
fi

# 3. different LLMC_BF16_MATMUL on the ranks: one error, before any step
out=$(timeout 120 $MPIRUN -np 1 -x LLMC_BF16_MATMUL=fp32 ./train_gpt_cpu_bf16 $MODEL -x 1 : -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1); rc=$?
n=$(echo "$out" | grep -c "^error: the ranks would run different configurations: rank 1 has bf16_matmul_env = - where rank 0 has bf16_matmul_env = fp32")
[ $rc = 1 ] && [ "$n" = 1 ] && ! echo "$out" | grep -q "^step" && ok "LLMC_BF16_MATMUL set on rank 0 only: one error naming bf16_matmul_env, exit 1, no step" ||
  bad "LLMC_BF16_MATMUL on rank 0 only: rc $rc: $(echo "$out" | grep -m2 -E 'error|step')"

# 4. a file for another CPU
sed -i 's/^cpu .*/cpu Another CPU 9000/' "$cal"
timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 > "$tmp/other.out" 2>&1
line=$(grep '^matmul:' "$tmp/other.out")
if [ $avx512 = 0 ]; then
  echo "$line" | grep -q "primitive: unavailable on this CPU" && echo "$line" | grep -q "for another CPU (Another CPU 9000; this one:" &&
    grep -q "^cpu Another CPU 9000" "$cal" && ok "a file for another CPU at $detected: not used, said so, left as it is" || bad "file for another CPU: $line"
else
  echo "$line" | grep -q "measured at start-up in .* is for another CPU .* written for the next start" && ! grep -q "^cpu Another CPU 9000" "$cal" &&
    ok "a file for another CPU: rank 0 measured at start-up and wrote this CPU's file" || bad "file for another CPU: $line"
fi

# 4b. rank 0 decides alone (a missing calibration file: it measures, at avx512 and above), the others wait
# for it without tripping a short --collective-timeout, and the wait says what rank 0 is doing; on every CPU
# with the test hook LLMC_TEST_SLOW_START_S=10 (rank 0's decision and -z auto's enumeration take 10 s more);
# --collective-timeout 5 (2 s timed out ordinary collectives on a loaded 2-core machine, load average 28)
out=$(timeout 300 $MPIRUN -np 2 -x LLMC_TEST_SLOW_START_S=10 -x LLMC_BF16_MATMUL_FILE="$tmp/none.matmul" ./train_gpt_cpu_bf16 $MODEL -x 1 -z auto \
      --collective-timeout 5 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "^rank 1 (node [^)]*): waiting 5 s for rank 0, which is deciding the bf16 matmul paths (it measures them on its own cores when the calibration file is missing" <<<"$out" \
   && grep -q "^rank 1 (node [^)]*): waiting 5 s for rank 0, which is enumerating -z auto's configurations: the collective timeout (5 s) does not apply to this wait" <<<"$out" \
   && grep -qE "^step +1/1" <<<"$out"; then
  ok "rank 0's start-up work 10 s with --collective-timeout 5 (the test hook): the job goes on, the wait says what rank 0 does"
else bad "rank 0's slow start-up with --collective-timeout 5 (exit $rc):"; grep -E "^error|^rank" <<<"$out" | head -3; fi
if [ $avx512 = 0 ]; then
  skip "a missing calibration file with --collective-timeout 5: rank 0 measures at start-up only where the primitive can run: $why"
else
  rm -f "$tmp/none.matmul"
  out=$(timeout 300 $MPIRUN -np 2 -x LLMC_BF16_MATMUL_FILE="$tmp/none.matmul" ./train_gpt_cpu_bf16 $MODEL -x 1 --collective-timeout 5 2>&1); rc=$?
  [ $rc = 0 ] && grep -q "^matmul: .*measured at start-up in" <<<"$out" && [ -f "$tmp/none.matmul" ] &&
    ok "a missing calibration file with --collective-timeout 5: rank 0 measured at start-up ($(grep -o "measured at start-up in [0-9.]* s" <<<"$out")), the job went on" ||
    bad "a missing calibration file with --collective-timeout 5 (exit $rc): $(grep -m2 -E "^error|^matmul" <<<"$out")"
  # the measurement ran the fp32-copy path on its shapes: what it grew is freed, so the run holds the copies its own
  # classes predict (the primitive for every class: none), the end line "predicted X B, allocated Y B" with X = Y
  cl=$(grep "of it the bf16 matmuls' buffers" <<<"$out")
  pr=$(sed -n 's/.*packed heads): predicted \([0-9]*\) B, allocated \([0-9]*\) B.*/\1 \2/p' <<<"$cl")
  if [ -n "$pr" ] && [ "${pr% *}" = "${pr#* }" ]; then
    ok "after a start-up measurement the matmul buffers (fp32 copies, oneDNN scratchpad, packed heads) are as predicted ($pr B)"
  else bad "after a start-up measurement: $cl"; fi
fi

# 5. avx512 and above: a per-class mix, the forced primitive
if [ $avx512 = 0 ]; then
  skip "no file and fake rates: rank 0 chooses per class and writes the file: $why"
  skip "a per-class mix of paths passes the float64 reference (1 and 2 ranks): $why"
  skip "a per-class mix of paths: stages 0 and 3 bitwise equal: $why"
  skip "LLMC_BF16_MATMUL=primitive: the line names oneDNN's implementation and ISA: $why"
else
  rm -f "$cal"
  export LLMC_BF16_MATMUL_RATES="fwd=300/200,dinp=100/200,dweight=300/200,lm_fwd=100/200,lm_dinp=300/200,lm_dweight=100/200,attention=300/200"
  good=1
  for run in "1 -z 0" "2 -z 3"; do
    n=${run%% *}; z=${run#* }
    timeout 300 $MPIRUN -np "$n" ./test_gpt_cpu_bf16 $REF $z > "$tmp/mix.out" 2>&1 && grep -q " 0 failed" "$tmp/mix.out" || good=0
  done
  paths=$(awk '$1 == "class" {printf "%s%s:%s", (n++ ? "," : ""), $2, $5}' "$cal" 2>/dev/null)
  [ "$paths" = "fwd:primitive,dinp:fp32,dweight:primitive,lm_fwd:fp32,lm_dinp:primitive,lm_dweight:fp32,attention:primitive" ] &&
    ok "no file and fake rates: rank 0 chose per class and wrote the file ($paths)" || bad "the measured file's paths: '$paths'"
  [ $good = 1 ] && grep -q "per class" "$tmp/mix.out" && ok "a per-class mix of paths passes the float64 reference (1 rank stage 0, 2 ranks stage 3)" ||
    bad "per-class mix against the reference: $(grep -m3 -E 'FAIL|error|matmul:' "$tmp/mix.out")"
  for z in 0 3; do timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -z $z -x 3 -o "$tmp/mix.z$z" > "$tmp/mix.z$z.out" 2>&1; done
  cmp -s "$tmp/mix.z0/model_00000003.bin" "$tmp/mix.z3/model_00000003.bin" && grep -q "bf16_matmul_by calibration-file" "$tmp/mix.z3/runs.txt" &&
    ok "a per-class mix of paths: stages 0 and 3 bitwise equal, the second run read the file the first wrote" ||
    bad "a per-class mix: stages differ or the file was not reused: $(cat "$tmp/mix.z3/runs.txt" 2>/dev/null)"
  unset LLMC_BF16_MATMUL_RATES
  line=$(LLMC_BF16_MATMUL=primitive timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1 | grep '^matmul:')
  onednn=$(grep -m1 '^cpu:' "$tmp/run.out" | sed 's/.*oneDNN \([a-z0-9_]*\)).*/\1/')
  echo "$line" | grep -q "oneDNN's bf16 matmul primitive (implementation [a-z]*:[a-z0-9_]*, oneDNN ISA $onednn), fp32 accumulation, every class (forced by LLMC_BF16_MATMUL=primitive)" &&
    { [ "$detected" = amx ] || ! echo "$line" | grep -qi amx; } && ok "LLMC_BF16_MATMUL=primitive: $line" || bad "LLMC_BF16_MATMUL=primitive: $line"
fi
# 6. the calibration is part of the run's identity: its thread count, provisional files, the state
cp "$tmp/cal.good" "$cal"
sed -i 's/^threads .*/threads 7/' "$cal"
if [ $avx512 = 0 ]; then
  line=$(timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1 | grep '^matmul:')
  echo "$line" | grep -q "($cal; its rates are of 7 threads, this run has 1: used, there is nothing to choose at this level)" &&
    ok "a file of 7 threads at $detected, this run 1 thread: used, the line says whose threads its rates are" || bad "a file of another thread count: $line"
  skip "a calibrated file of another thread count where the primitive can run: measured again, the file kept: $why"
else
  line=$(LLMC_BF16_MATMUL_RATES="fwd=300/200,dinp=100/200,dweight=300/200,lm_fwd=100/200,lm_dinp=300/200,lm_dweight=100/200,attention=300/200" \
         timeout 300 $MPIRUN -np 1 -x LLMC_BF16_MATMUL_RATES ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1 | grep '^matmul:')
  t1=${cal%.matmul}.threads1.matmul
  echo "$line" | grep -q "measured at start-up in .* is for 7 threads (this run: 1); written for the next start, provisional .* as $t1" &&
    grep -q "^threads 7$" "$cal" && grep -q "^threads 1$" "$t1" && grep -q "^provisional 1$" "$t1" &&
    ok "a calibrated file of 7 threads, this run 1: measured once, written as the 1-thread file ($(basename "$t1")), the main file kept" ||
    bad "a file of another thread count: $line"
  # the next start of that thread count reads it, whatever the hook (a new timing) would say now
  line=$(LLMC_BF16_MATMUL_RATES="fwd=100/300,dinp=300/100,dweight=100/300,lm_fwd=300/100,lm_dinp=100/300,lm_dweight=300/100,attention=100/300" \
         timeout 300 $MPIRUN -np 1 -x LLMC_BF16_MATMUL_RATES ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1 | grep '^matmul:')
  echo "$line" | grep -q "fwd primitive 300/200 dinp fp32 100/200 .*($t1; provisional" &&
    ok "the next 1-thread start reads the 1-thread file (measures nothing)" || bad "the next 1-thread start: $line"
  # --calibrate-matmul at 1 thread beside a main file of 7: calibrates the 1-thread file, the main file kept
  timeout 600 ./train_gpt_cpu_bf16 --calibrate-matmul > "$tmp/cal1.out" 2>&1
  grep -q "^provisional 0$" "$t1" && grep -q "^threads 7$" "$cal" && grep -q "wrote $t1" "$tmp/cal1.out" &&
    ok "--calibrate-matmul at 1 thread beside a main file of 7: the 1-thread file calibrated, the main file kept" ||
    bad "--calibrate-matmul at 1 thread: $(tail -1 "$tmp/cal1.out"); $(grep -h '^threads\|^provisional' "$cal" "$t1" | tr '\n' ' ')"
  rm -f "$t1" "$t1.lock"
fi
cp "$tmp/cal.good" "$cal"
sed -i 's/^provisional .*/provisional 1/' "$cal"
line=$(timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 2>&1 | grep '^matmul:')
echo "$line" | grep -q "provisional: measured at a start-up, \`./train_gpt_cpu_bf16 --calibrate-matmul\` (make) replaces it)" &&
  ok "a provisional file: used, the start-up line says it is provisional" || bad "a provisional file: $line"
timeout 600 ./train_gpt_cpu_bf16 --calibrate-matmul > /dev/null 2>&1
grep -q "^provisional 0$" "$cal" && ok "--calibrate-matmul replaces the provisional file" || bad "after --calibrate-matmul: $(grep provisional "$cal")"
# the paths are recorded in the state (header word 26: 1<<20 recorded | 1<<19 bf16 | bit k = class k on the primitive)
word26() { od -A n -t d8 -j 208 -N 8 "$1" | tr -d ' '; }
timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 2 -n 1 -o "$tmp/st" > "$tmp/st.out" 2>&1
mask=$(awk '$1 == "class" {if ($5 == "primitive") m += 2 ^ n; n++} END {print m + 0}' "$cal")
w=$(word26 "$tmp/st/state_00000001.bin" 2>/dev/null)
[ "$w" = $(( (1 << 20) + (1 << 19) + mask )) ] && ok "the state records the bf16 paths: word 26 = $w (recorded, bf16, primitive classes mask $mask)" || bad "state word 26: '$w' (expected $(( (1 << 20) + (1 << 19) + mask )))"
timeout 300 $MPIRUN -np 1 ./train_gpt_cpu $MODEL -x 1 -o "$tmp/st32" > /dev/null 2>&1
w=$(word26 "$tmp/st32/state_00000001.bin" 2>/dev/null)
[ "$w" = $(( 1 << 20 )) ] && ok "the fp32 program's state: word 26 = $w (recorded, one path)" || bad "fp32 state word 26: '$w'"
# a resume whose state recorded other paths than the calibration file (the saved state hand-edited: class fwd
# flipped): at avx512 and above it takes the state's paths (the run goes on with the numbers of the run it
# resumes, whatever the file or a new timing say), no note; below, where the primitive cannot run, the note
rm -f "$tmp/st/model_00000002.bin" "$tmp/st/state_00000002.bin"
/usr/bin/python3 -c "
import struct, sys
p = sys.argv[1]; f = open(p, 'r+b'); f.seek(208); w = struct.unpack('<q', f.read(8))[0]; f.seek(208); f.write(struct.pack('<q', w ^ 1)); f.close()" "$tmp/st/state_00000001.bin"
out=$(timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 2 -y 1 -o "$tmp/st" 2>&1); rc=$?
fwd_was=$([ $((mask & 1)) = 1 ] && echo fp32 || echo primitive); fwd_now=$([ $((mask & 1)) = 1 ] && echo primitive || echo fp32)
if [ $avx512 = 1 ]; then
  w=$(word26 "$tmp/st/state_00000002.bin" 2>/dev/null)
  if [ $rc = 0 ] && grep -q "^matmul: .*(the paths the resumed state recorded ($tmp/st/state_00000001.bin), not measured)" <<<"$out" &&
     ! grep -q "^note: resume: the matmul paths" <<<"$out" && [ "$w" = $(( (1 << 20) + (1 << 19) + (mask ^ 1) )) ]; then
    ok "a resume whose state recorded other paths (fwd:$fwd_was): takes them, no note, and records them again (word 26 = $w)"
  else bad "resume with other paths: rc $rc: $(grep -m2 -E '^matmul|^note: resume|^error' <<<"$out"); word 26 $w"; fi
  # LLMC_BF16_MATMUL forces a path: it wins, and the note says the numbers are not the saved run's
  rm -f "$tmp/st/model_00000002.bin" "$tmp/st/state_00000002.bin"
  force=$([ "$fwd_was" = fp32 ] && echo primitive || echo fp32)
  out=$(LLMC_BF16_MATMUL=$force timeout 300 $MPIRUN -np 1 -x LLMC_BF16_MATMUL ./train_gpt_cpu_bf16 $MODEL -x 2 -y 1 -o "$tmp/st" 2>&1); rc=$?
  [ $rc = 0 ] && grep -q "^note: resume: the matmul paths differ from the saved run's (saved: fwd:$fwd_was,.*; this run: fwd:$force,.*): .*not bitwise" <<<"$out" &&
    ok "a resume with LLMC_BF16_MATMUL=$force against the state's fwd:$fwd_was: the variable wins, one note naming both" ||
    bad "resume forced against the state: rc $rc: $(grep -m1 -E '^note: resume|^error' <<<"$out")"
else
  if [ $rc = 0 ] && grep -q "^note: resume: the matmul paths differ from the saved run's (saved: fwd:$fwd_was,.*; this run: fwd:$fwd_now,.*): .*not bitwise" <<<"$out"; then
    ok "a resume whose state recorded the primitive at $detected (it cannot run here): one note naming both"
  else bad "resume with other paths: rc $rc: $(grep -m1 -E '^note: resume|^error' <<<"$out")"; fi
  skip "a resume takes the state's paths where the primitive can run, LLMC_BF16_MATMUL forcing another is noted: $why"
fi
out=$(timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 3 -y 1 -o "$tmp/st" 2>&1)
grep -q "^note: resume: the matmul paths" <<<"$out" && bad "a resume with the same paths printed a paths note" || ok "a resume with the same paths: no note"

# 7. the same configuration gives the same bits however busy the machine: the paths are decided once (the
# first start of a thread count measures and writes its file, every later start reads it), never per run.
# A busy loop on every core beside: 5 runs of one configuration from a missing file, one model hash; two runs
# that start together measure once; a resume whose calibration file changed meanwhile is cmp-equal to the
# uninterrupted run; --invariant 1 measures nothing
unset LLMC_BF16_MATMUL_RATES
busy=(); for _ in $(seq "$(ncpu)"); do ( while :; do :; done ) & busy+=($!); done
stop_busy() { kill "${busy[@]}" 2>/dev/null; wait "${busy[@]}" 2>/dev/null; busy=(); }
trap 'stop_busy; rm -rf "$tmp"' EXIT
export LLMC_BF16_MATMUL_FILE=$tmp/load.matmul
hashes=""; measured=0
for i in 1 2 3 4 5; do
  timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 3 -o "$tmp/load$i" > "$tmp/load$i.out" 2>&1
  grep -q "^matmul: .*measured at start-up" "$tmp/load$i.out" && measured=$((measured + 1))
  hashes="$hashes $(sha256sum < "$tmp/load$i/model_00000003.bin" 2>/dev/null | cut -c1-16)"
done
n=$(tr ' ' '\n' <<<"$hashes" | grep -c .); u=$(tr ' ' '\n' <<<"$hashes" | grep . | sort -u | wc -l)
want_measured=$avx512
[ "$n" = 5 ] && [ "$u" = 1 ] && [ $measured = $want_measured ] &&
  ok "5 runs of one bf16 configuration beside a busy loop per core: one model hash ($(tr ' ' '\n' <<<"$hashes" | grep -m1 .)), $measured start-up measurement(s)" ||
  bad "5 runs under load: $n models, $u distinct hashes ($hashes), $measured measured (want $want_measured)"
# two first starts at once: one measures, the other waits for its file (the lock) and reads it
if [ $avx512 = 1 ]; then
  export LLMC_BF16_MATMUL_FILE=$tmp/pair.matmul
  # stdout and stderr in separate files (a line on stderr cannot land inside the matmul line, which
  # mpirun forwards in the chunks the rank's stdout buffer flushed; not shown to be the cause of the
  # one failure, where run A's paths were empty: a clean run writes nothing on stderr)
  timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 > "$tmp/pairA.out" 2> "$tmp/pairA.err" & pa=$!
  timeout 300 $MPIRUN -np 1 ./train_gpt_cpu_bf16 $MODEL -x 1 > "$tmp/pairB.out" 2> "$tmp/pairB.err" & pb=$!
  wait $pa; ra=$?; wait $pb; rb=$?
  m=$(cat "$tmp/pairA.out" "$tmp/pairB.out" | grep -c "^matmul: .*measured at start-up")
  pA=$(grep '^matmul:' "$tmp/pairA.out" | grep -o "fwd [a-z0-9]* .*attention [a-z0-9]*" | sed 's/ [0-9]*\/[0-9]*//g')
  pB=$(grep '^matmul:' "$tmp/pairB.out" | grep -o "fwd [a-z0-9]* .*attention [a-z0-9]*" | sed 's/ [0-9]*\/[0-9]*//g')
  [ "$m" = 1 ] && [ -n "$pA" ] && [ "$pA" = "$pB" ] && ok "two runs that start together without a file: one measured, both took its paths ($pA)" ||
    { bad "two first starts: $m measured; paths '$pA' / '$pB'"
      # the diagnosis (a make test on a quiet Zen 4 once saw A's paths empty; not reproduced in 24 pairs)
      for x in A B; do r=ra; [ $x = B ] && r=rb
        echo "    run $x: exit ${!r}; $(grep -c . "$tmp/pair$x.out") lines; its matmul line: $(grep -m1 '^matmul:' "$tmp/pair$x.out" | cut -c1-300)"
        cat "$tmp/pair$x.out" "$tmp/pair$x.err" | grep -v '^matmul:' | grep -m3 -iE 'error|warn|abort|signal|killed|timeout' | cut -c1-300 | sed 's/^/      /'; done; }
else
  skip "two first starts measure once (the lock): nothing is measured below avx512: $why"
fi
# a resume beside the busy loops, its calibration file changed since the saved run (every class flipped):
# cmp-equal to the uninterrupted run, which also ran beside them
export LLMC_BF16_MATMUL_FILE=$tmp/load.matmul
timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 4 -o "$tmp/full" > /dev/null 2>&1
timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 4 -n 2 -o "$tmp/cut" > /dev/null 2>&1
rm -f "$tmp/cut/model_00000004.bin" "$tmp/cut/state_00000004.bin"
f1=${LLMC_BF16_MATMUL_FILE%.matmul}.threads1.matmul; [ -f "$f1" ] || f1=$LLMC_BF16_MATMUL_FILE
[ $avx512 = 1 ] && sed -i 's/ primitive$/ PRIM/; s/ fp32$/ primitive/; s/ PRIM$/ fp32/' "$f1"
timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 4 -n 2 -y 1 -o "$tmp/cut" > "$tmp/cut.out" 2>&1
cmp -s "$tmp/full/model_00000004.bin" "$tmp/cut/model_00000004.bin" && cmp -s "$tmp/full/state_00000004.bin" "$tmp/cut/state_00000004.bin" &&
  ok "a -y 1 resume beside a busy loop per core, the calibration file changed meanwhile: cmp-equal to the uninterrupted run" ||
  bad "resume under load: checkpoints differ ($(grep -m1 '^matmul:' "$tmp/cut.out" | cut -c1-200))"
# --invariant 1 measures nothing (a missing file stays missing; the line says so)
export LLMC_BF16_MATMUL_FILE=$tmp/inv.matmul
out=$(timeout 300 $MPIRUN -np 2 ./train_gpt_cpu_bf16 $MODEL -x 1 --invariant 1 2>&1); rc=$?
# (at avx512_bf16 and above every class's fixed tiles run on the primitive; at avx512 every class on the copy path)
if cpu_isa_can avx512_bf16 >/dev/null; then inv_line="(--invariant 1: every class on fixed single-threaded tiles of the primitive"
else inv_line="(--invariant 1: the fp32-copy path on fixed tiles for every class"; fi
if [ $avx512 = 1 ]; then
  [ $rc = 0 ] && grep -qF "$inv_line" <<<"$(grep '^matmul: ' <<<"$out")" && grep -q "nothing measured)" <<<"$out" && [ ! -e "$tmp/inv.matmul" ] &&
    ok "--invariant 1 with no calibration file: nothing measured, nothing written" || bad "--invariant 1: rc $rc: $(grep -m1 -E '^matmul|^error' <<<"$out")"
else
  [ $rc = 0 ] && ! grep -q "measured at start-up" <<<"$out" && ok "--invariant 1 at $detected: nothing measured" || bad "--invariant 1: rc $rc"
fi
stop_busy

summary
