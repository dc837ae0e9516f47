#!/usr/bin/env bash
# make bench: CPU speed figures (a benchmark, not a test). Trains two fixed
# configs from random init for a few steps on one rank with all cores and
# prints ms/step, tokens/s and achieved GFLOP/s (6*num_parameters + 12*L*C*T
# flops per token), then the kernel-level benchmark (sgemm per shape, one
# step built from the kernels alone, time per kernel group).
#   d6:   6 layers, 6 heads, 384 channels, vocab 50304, B=4, T=256
#   124M: GPT-2 small (d12), B=4, T=64
set -u
cd "$(dirname "$0")/.."
STEPS=${STEPS:-8}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); BLAS: $(ldd ./train_gpt_cpu | grep -oE 'lib(dnnl|openblas|blis)[^ ]*' | head -1)"
for cfg in "d6|-e d6 -b 4 -t 256" "124M|-e d12 -b 4 -t 64"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  line=$(./train_gpt_cpu $flags -x $STEPS -v 0 -s 0 2>&1 | grep "^average")
  echo "$name ($flags, $STEPS steps): $line"
done
if [ "${KERNELS:-1}" = 1 ]; then
  gcc -O3 -mavx2 -mfma -fopenmp -std=c11 -I. $BLAS_CFLAGS dev/bench_kernels.c $BLAS_LIBS -lm -o build/bench_kernels && ./build/bench_kernels
fi
