#!/usr/bin/env bash
# Compiles the CUDA programs (./train_gpt, ./test_gpt: the same train_gpt.cu
# and test_gpt.cu as the CPU build, with llmc/cuda/ as the backend) and the
# dev/cuda kernel checks, for sm_80 and sm_90. This machine has no GPU, so
# nothing here runs them: scripts/gpu_check.sh does that on a GPU machine.
# A compile error fails; warnings are shown in the log.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "nvcc not found: the CUDA build cannot be compiled on this machine"
  if [ "${CI:-}" = true ]; then echo "0 passed, 1 failed"; exit 1; fi
  echo "0 passed, 0 failed"; exit 0
fi
for target in train_gpt test_gpt cuda-dev; do
  t0=$(date +%s)
  if make -s "$target" > "build/cuda_$target.log" 2>&1; then
    pass=$((pass+1)); echo "ok   make $target ($(( $(date +%s) - t0 )) s, $(grep -c -i warning "build/cuda_$target.log") warning lines)"
  else
    fail=$((fail+1)); echo "FAIL make $target"; tail -30 "build/cuda_$target.log"
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
