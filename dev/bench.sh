#!/usr/bin/env bash
# make bench: CPU speed figures (a benchmark, not a test), fp32 and bf16 side
# by side. Trains two fixed configs from random init for a few steps on one
# rank with all cores, REPS times each, and prints per config and precision
# ms/step (min and median over the runs; each run's figure is its mean of
# steps 2..STEPS), tokens/s, achieved GFLOP/s (6*num_parameters + 12*L*C*T
# flops per token) and its share of the measured peak of that precision
# (dev/bench_kernels.c "peak": the fp32 FMA rate; for the bf16 program the
# rate of the matmul implementation it uses, see llmc/cpu/matmul.h). Then the
# kernel-level benchmark per precision (matmul per shape, one step built
# from the kernels alone, time per kernel group) unless KERNELS=0.
#   d6:   6 layers, 6 heads, 384 channels, vocab 50304, B=4, T=256
#   124M: GPT-2 small (d12), B=4, T=64
# Environment: PRECISIONS="fp32 bf16" (make bench PRECISION=x runs one),
# STEPS=8, REPS=3, KERNELS=1. Timing means something only on a quiet
# machine: the load average is printed before and after.
set -u
cd "$(dirname "$0")/.."
STEPS=${STEPS:-8}; REPS=${REPS:-3}; PRECISIONS=${PRECISIONS:-"fp32 bf16"}
mkdir -p build
prog() { [ "$1" = bf16 ] && echo ./train_gpt_cpu_bf16 || echo ./train_gpt_cpu; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A PEAK
for p in $PRECISIONS; do
  if [ "$p" = bf16 ]; then
    gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. -DLLMC_BF16 dev/bench_kernels.c -ldnnl -lm -o build/bench_kernels_bf16 || exit 1
    out=$(./build/bench_kernels_bf16 peak)
    PEAK[bf16]=$(echo "$out" | awk '/^peak bf16-program/ {print $3}')
  else
    gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. $BLAS_CFLAGS dev/bench_kernels.c $BLAS_LIBS -lm -o build/bench_kernels || exit 1
    out=$(./build/bench_kernels peak)
    PEAK[fp32]=$(echo "$out" | awk '/^peak fp32-program/ {print $3}')
  fi
  echo "$out" | grep "^peak"
done
printf "\n%-6s %-5s %9s %9s %9s %9s %9s %7s  %s\n" config prec "ms min" "ms med" "tok/s" "tok/s med" "GFLOP/s" "% peak" "(REPS=$REPS runs of $STEPS steps)"
for cfg in "d6|-e d6 -b 4 -t 256" "124M|-e d12 -b 4 -t 64"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  for p in $PRECISIONS; do
    ms=()
    for r in $(seq "$REPS"); do
      line=$($(prog "$p") $flags -x "$STEPS" -v 0 -s 0 2>&1 | grep "^average")
      ms+=("$(echo "$line" | awk '{print $2}')")
      # the fields before "tokens/s," and "GFLOP/s" (the line's wording may grow)
      tok_ms=$(echo "$line" | awk '{for (i = 2; i <= NF; i++) if ($i == "tokens/s,") print $(i-1) * $2}')   # tokens/s x ms/step
      gf_ms=$(echo "$line" | awk '{for (i = 2; i <= NF; i++) if ($i == "GFLOP/s") print $(i-1) * $2}')   # GFLOP/s x ms/step
    done
    sorted=($(printf "%s\n" "${ms[@]}" | sort -g))
    min=${sorted[0]}; med=${sorted[$(( (${#sorted[@]} - 1) / 2 ))]}
    awk -v n="$name" -v p="$p" -v mn="$min" -v md="$med" -v tk="$tok_ms" -v gf="$gf_ms" -v pk="${PEAK[$p]:-0}" 'BEGIN {
      g = gf / mn; printf "%-6s %-5s %9.1f %9.1f %9.0f %9.0f %9.1f %6.0f%%\n", n, p, mn, md, tk / mn, tk / md, g, (pk > 0 ? 100 * g / pk : 0) }'
  done
done
echo "for comparison (the issue's figures, same configs, this machine class, not re-measured here):"
echo "  PyTorch 1.13 bf16 autocast 944-1045 (d6) / 165 (124M) tokens/s; PyTorch fp32 541 / 61; llm.c CPU 158 / 38"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${KERNELS:-1}" = 1 ]; then
  for p in $PRECISIONS; do
    echo; echo "=== kernels, $p"
    if [ "$p" = bf16 ]; then ./build/bench_kernels_bf16; else ./build/bench_kernels; fi
  done
fi
