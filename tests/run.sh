#!/usr/bin/env bash
# Runs every check a CPU machine can run (called by `make test`, which first
# installs packages, prepares the data, regenerates the PyTorch reference
# files and builds). Each suite prints "N passed, M failed, K skipped" (or
# "N passed, M failed") as its last line; this script adds them up, prints
# "N passed, M failed, K skipped" and exits non-zero if any suite failed.
# A check this CPU cannot run is skipped and counted with the ISA it needs;
# the kernel suites run again at every lower ISA level (LLMC_CPU_ISA), so
# an AVX-512 or AMX machine also tests what an AVX2-only machine runs.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
total_pass=0; total_fail=0; total_skip=0; failed_suites=()
CC_TEST="gcc -O2 -std=gnu11 -Wall -I."
mkdir -p build

suite() { # name command...
  local name=$1; shift
  echo "=== $name"
  local log="build/test_${name// /_}.log"
  local t0=$(date +%s)
  "$@" > "$log" 2>&1
  local rc=$?
  local last=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$log" | tail -1)
  local p=$(echo "$last" | awk '{print $1}'); local f=$(echo "$last" | awk '{print $3}')
  local k=$(echo "$last" | awk '$6 == "skipped" {print $5}')
  [ -z "$p" ] && { p=0; f=1; }
  [ -z "$k" ] && k=0
  [ $rc -ne 0 ] && [ "$f" = 0 ] && f=1
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + k))
  grep -E "^skip " "$log" | sed 's/^/    /' | head -20
  if [ "$f" != 0 ] || [ $rc -ne 0 ]; then
    failed_suites+=("$name"); tail -25 "$log"
  fi
  echo "    $name: ${last:-no summary line} (exit $rc, $(( $(date +%s) - t0 )) s)"
}

suite "reference selftest" /usr/bin/python3 tests/suites/reference_selftest.py --dir data/ref
suite "dataloader" bash -c "$CC_TEST tests/unit/test_dataloader.c -o build/test_dataloader && ./build/test_dataloader"
suite "shard plan" bash -c "$CC_TEST tests/unit/test_zero.c -o build/test_zero -lm && ./build/test_zero"
suite "fit budget" bash -c "$CC_TEST tests/unit/test_fit.c -o build/test_fit -lm && ./build/test_fit"
suite "fit choice" bash -c "mpicc -O2 -std=gnu11 -Wall -fopenmp -march=x86-64-v3 -I. tests/unit/test_fit_choose.c -o build/test_fit_choose -lopenblas -lm && $MPIRUN -np 1 ./build/test_fit_choose"
suite "block quantization" bash -c "$CC_TEST tests/unit/test_quant.c -o build/test_quant -lm && ./build/test_quant"
suite "quantized collectives" bash -c "mpicc -O2 -std=gnu11 -Wall -fopenmp -I. tests/unit/test_quant_coll.c -o build/test_quant_coll -lm && $MPIRUN -np 4 ./build/test_quant_coll"
suite "cpu kernels" bash -c "$CC_TEST -O3 -march=x86-64-v3 -fopenmp tests/unit/test_kernels.c -o build/test_kernels -lopenblas -lm && ./build/test_kernels"
suite "cpu kernels bf16" bash -c "$CC_TEST -O3 -march=x86-64-v3 -fopenmp -DLLMC_BF16 tests/unit/test_kernels.c -o build/test_kernels_bf16 -ldnnl -lm && ./build/test_kernels_bf16"
suite "matmul choice" bash -c "$CC_TEST -O2 -march=x86-64-v3 -fopenmp -DLLMC_BF16 -DLLMC_KERNELS_ID='\"test\"' tests/unit/test_matmul_choice.c -o build/test_matmul_choice -ldnnl -lm && ./build/test_matmul_choice"
# the fp32 kernels on oneDNN's sgemm, as the programs build them when oneDNN is installed
suite "cpu kernels onednn" bash -c "$CC_TEST -O3 -march=x86-64-v3 -fopenmp -DLLMC_USE_DNNL tests/unit/test_kernels.c -o build/test_kernels_dnnl -l:libdnnl.so.2 -lm && ./build/test_kernels_dnnl"
# again at every ISA level below this CPU's (the same binaries, capped by LLMC_CPU_ISA)
detected=$(cpu_isa_detected)
for L in $CPU_ISA_ALL; do
  [ "$L" = "$detected" ] && break
  suite "cpu kernels at $L" env LLMC_CPU_ISA=$L ./build/test_kernels
  suite "cpu kernels onednn at $L" env LLMC_CPU_ISA=$L ./build/test_kernels_dnnl
  suite "cpu kernels bf16 at $L" env LLMC_CPU_ISA=$L ./build/test_kernels_bf16
done
suite "isa levels" bash tests/suites/isa.sh
suite "bf16 matmul paths" bash tests/suites/matmul_choice.sh
suite "estimator" bash tests/suites/estimator.sh
suite "zero sweep" bash tests/suites/zero_sweep.sh
suite "zero sweep bf16" env PROG=./test_gpt_cpu_bf16 bash tests/suites/zero_sweep.sh
suite "bf16 reference" bash tests/suites/bf16.sh
suite "overlap and hsdp" bash tests/suites/overlap.sh
suite "overlap and hsdp bf16" env PROG=./train_gpt_cpu_bf16 bash tests/suites/overlap.sh
suite "memory by stage" bash tests/suites/memory.sh
suite "fit check and -z auto" bash tests/suites/fit.sh
suite "fit details" bash tests/suites/fit_details.sh
suite "activation recompute" bash tests/suites/recompute.sh
suite "layout invariance" bash tests/suites/invariance.sh
suite "zero++" bash tests/suites/zeropp.sh
suite "training" bash tests/suites/train.sh
suite "cluster" bash tests/suites/cluster.sh
suite "network faults" bash tests/suites/net_faults.sh
suite "interrupts and flight records" bash tests/suites/interrupt.sh
suite "kill at any moment" bash tests/suites/kill.sh
suite "flight records" bash tests/suites/flight.sh
suite "slurm" bash tests/suites/slurm.sh
suite "placement" bash tests/suites/placement.sh
suite "elastic" bash tests/suites/elastic.sh
suite "bad input" bash tests/suites/bad_input.sh
suite "plots" bash tests/suites/plots.sh
suite "resume" bash tests/suites/resume.sh
suite "resume bf16" env TRAIN_GPT=./train_gpt_cpu_bf16 bash tests/suites/resume.sh
suite "faults" bash tests/suites/faults.sh
suite "offload" bash tests/suites/offload.sh
suite "docs" bash tests/suites/docs.sh
suite "entry points" bash tests/suites/entry_points.sh
suite "compare runs" bash tests/suites/compare.sh
suite "check a model" bash tests/suites/check_model.sh
suite "sanitizers" bash tests/suites/sanitizers.sh
suite "fuzz smoke" bash tests/fuzz/run.sh 15
suite "gpu dry run" bash tests/suites/gpu_dry_run.sh

echo
[ ${#failed_suites[@]} -gt 0 ] && echo "failed suites: ${failed_suites[*]}"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ $total_fail -eq 0 ]
