#!/usr/bin/env bash
# The GPU check rehearsed on this machine (no GPU), as a `make test` suite;
# it is also the CUDA compile test of CI (sm_90 + compute_90 PTX, the
# architecture of an H100 or H200; every CUDA program is compiled once):
#   1. the single-rank MPI stand-in (llmc/mpi_stub/mpi.h): its own checks
#      (tests/unit/test_mpi_stub.c, C and C++), refusal of a multi-process launch and
#      of a receive nothing matches; test_gpt_cpu built with gcc against it
#      must print, on the odd and tiny references, exactly the lines (errors
#      to the last digit) of test_gpt_cpu built with mpicc at 1 rank
#   2. scripts/gpu_prepare.sh when build/gpu-carry is missing or older than
#      the script (apt-get download of Open MPI + data + references)
#   3. GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh: the GPU check in a copy
#      of the tree, this machine's MPI and NCCL hidden (see gpu_check.sh): the
#      unpack of the carried MPI, the closure of its libraries, NCCL from a
#      stand-in wheel, the CUDA builds with MPI and without, mpirun of the CUDA
#      binary, the no-GPU error path, the reference generation; the stages
#      that need the GPU are counted as skipped, not passed
# Last line: N passed, M failed (the sum of the three).
set -u
cd "$(dirname "$0")/../.."
. tests/lib.sh
mkdir -p build

# ---- 1. the MPI stand-in
if gcc -std=gnu11 -Wall -Wextra -Werror -Wno-unused-function -I. -Illmc/mpi_stub tests/unit/test_mpi_stub.c -o build/test_mpi_stub \
   && ./build/test_mpi_stub > build/test_mpi_stub.log 2>&1; then ok "mpi stand-in checks (C): $(tail -1 build/test_mpi_stub.log)"
else bad "mpi stand-in checks (C)"; cat build/test_mpi_stub.log; fi
if g++ -std=c++17 -Wall -Wextra -Werror -Wno-unused-function -x c++ -I. -Illmc/mpi_stub tests/unit/test_mpi_stub.c -o build/test_mpi_stub_cxx \
   && ./build/test_mpi_stub_cxx > /dev/null 2>&1; then ok "mpi stand-in checks (C++17)"
else bad "mpi stand-in checks (C++17)"; fi
out=$(OMPI_COMM_WORLD_SIZE=2 ./build/test_mpi_stub 2>&1); rc=$?
if [ $rc -eq 1 ] && [ "$(echo "$out" | grep -c '^error: .*launched as 2 processes')" = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ]; then
  ok "mpi stand-in refuses a 2-process launch (one error line, exit 1)"
else bad "mpi stand-in under a 2-process launch: exit $rc: $out"; fi
out=$(./build/test_mpi_stub unmatched 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "^error: .*no matching message"; then ok "mpi stand-in: unmatched receive ends with one error line"
else bad "mpi stand-in: unmatched receive: exit $rc: $out"; fi

CFLAGS_STUB="-O3 -march=x86-64-v3 -fno-math-errno -std=gnu11 -fopenmp -Wall -Wextra -Wno-unused-function -Wno-unused-parameter -I."
LIBS_STUB="-lopenblas -lm"
if [ -e /usr/lib/x86_64-linux-gnu/libdnnl.so.2 ]; then CFLAGS_STUB="$CFLAGS_STUB -DLLMC_USE_DNNL"; LIBS_STUB="-l:libdnnl.so.2 $LIBS_STUB"; fi
if gcc $CFLAGS_STUB -Illmc/mpi_stub -x c test_gpt.cu -o build/test_gpt_cpu_stub $LIBS_STUB > build/test_gpt_cpu_stub.build.log 2>&1; then
  ok "test_gpt_cpu builds with gcc against the stand-in (no mpicc)"
  for c in tiny odd; do
    [ -f data/ref/${c}_debug_state.bin ] || { bad "no data/ref/${c}_debug_state.bin (make ref)"; continue; }
    OMP_NUM_THREADS=1 timeout 120 ./build/test_gpt_cpu_stub -e data/ref/${c}_model.bin -s data/ref/${c}_debug_state.bin -z 1 \
      > build/test_gpt_cpu_stub_$c.log 2>&1; rc=$?
    if [ $rc -ne 0 ]; then bad "test_gpt_cpu (stand-in) on $c: exit $rc"; tail -5 build/test_gpt_cpu_stub_$c.log; continue; fi
    ok "test_gpt_cpu (stand-in) on $c passes its reference checks: $(tail -1 build/test_gpt_cpu_stub_$c.log)"
    if [ -x ./test_gpt_cpu ] && command -v mpirun >/dev/null 2>&1; then
      OMP_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 ./test_gpt_cpu -e data/ref/${c}_model.bin \
        -s data/ref/${c}_debug_state.bin -z 1 > build/test_gpt_cpu_mpi_$c.log 2>&1
      if diff <(grep -E "^(OK|FAIL)" build/test_gpt_cpu_stub_$c.log) <(grep -E "^(OK|FAIL)" build/test_gpt_cpu_mpi_$c.log) > /dev/null; then
        ok "test_gpt_cpu on $c: stand-in and Open MPI print the same $(grep -c -E '^(OK|FAIL)' build/test_gpt_cpu_stub_$c.log) check lines ($(tail -1 build/test_gpt_cpu_stub_$c.log))"
      else bad "test_gpt_cpu on $c: the stand-in's lines differ from Open MPI's"; diff <(grep -E "^(OK|FAIL)" build/test_gpt_cpu_stub_$c.log) <(grep -E "^(OK|FAIL)" build/test_gpt_cpu_mpi_$c.log) | head; fi
    else skip "test_gpt_cpu on $c: stand-in against Open MPI: skipped (needs ./test_gpt_cpu and mpirun to compare with)"; fi
  done
else bad "test_gpt_cpu against the stand-in does not build"; tail -20 build/test_gpt_cpu_stub.build.log; fi

# ---- 2 and 3: the GPU check's dry run
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  if [ "${CI:-}" = true ]; then bad "the GPU check's dry run: nvcc not found (CI must compile the CUDA build)"
  else skip "the GPU check's dry run: skipped (needs nvcc, the CUDA toolkit; not on this machine)"; fi
  summary; exit
fi
if [ ! -f build/gpu-carry/MANIFEST ] || [ scripts/gpu_prepare.sh -nt build/gpu-carry/MANIFEST ]; then
  if bash scripts/gpu_prepare.sh > build/gpu_prepare.log 2>&1; then ok "gpu_prepare: $(tail -1 build/gpu_prepare.log)"
  else bad "gpu_prepare"; tail -5 build/gpu_prepare.log; summary; exit 1; fi
fi
t0=$(date +%s)
# the device budget (450 s) is about GPU time; on a busy 2-core machine the
# rehearsal may take longer, and no stage should be skipped for time here
GPU_CHECK_DRY_RUN=1 GPU_CHECK_BUDGET=${GPU_CHECK_BUDGET:-1800} bash scripts/gpu_check.sh > build/gpu_dry_run.log 2>&1; rc=$?
sed -n '/=== gpu_check summary/,$p' build/gpu_dry_run.log
last=$(grep -E "^[0-9]+ passed, [0-9]+ failed" build/gpu_dry_run.log | tail -1)
p=$(echo "$last" | awk '{print $1}'); f=$(echo "$last" | awk '{print $3}' | tr -d ,)
k=$(echo "$last" | awk '$6 == "skipped" {print $5}')
# GPU stages run on the emulated device: passed checks of this (CPU) suite, never GPU passes
e=$(grep -E "^[0-9]+ emulated" build/gpu_dry_run.log | tail -1 | awk '{print $1}')
[ -n "$e" ] && [ "$e" -gt 0 ] && p=$((p + e)) && echo "dry run: $e GPU stages ran on the emulated device (counted here as passed CPU checks, in the GPU check as emulated)"
[ -z "$p" ] && { p=0; f=1; tail -30 build/gpu_dry_run.log; }
[ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
echo "dry run: exit $rc in $(( $(date +%s) - t0 )) s (log: build/gpu_dry_run.log)"
pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${k:-0}))
summary
