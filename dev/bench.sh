#!/usr/bin/env bash
# make bench: CPU speed figures (a benchmark, not a test): our two programs
# and PyTorch (dev/bench_pytorch.py: the same model, batch, AdamW and
# clipping, fp32 and bf16 autocast) measured one after another in this run,
# on one rank with all cores, REPS times each, for two fixed configs:
#   d6:   6 layers, 6 heads, 384 channels, vocab 50304, B=4, T=256
#   124M: GPT-2 small (d12), B=4, T=64
# Per row: ms/step (min and median over the runs; each run's figure is its
# mean of steps 2..STEPS), tokens/s, achieved GFLOP/s (6*num_parameters +
# 12*L*C*T flops per token, the same count for every row) and its share of
# this CPU's register-loop peak of the instructions the row's matmuls run
# on (dev/bench_kernels.c peak, llmc/cpu/isa.h levels): ours-fp32 and
# pytorch-fp32 the fp32 FMA peak of the level (AVX-512 or AVX2); ours-bf16
# the peak of its matmul implementation (AMX tiles for the bf16 primitive,
# the fp32 peak for the fp32-copy path); pytorch-bf16 the best bf16
# instruction this CPU has (AMX, else AVX512-BF16, else the fp32 peak).
# Then the kernel-level benchmark per precision (matmul per shape, one step
# built from the kernels alone, time per kernel group) unless KERNELS=0.
# Timing means something only on a quiet machine: every run measures the
# CPU time other processes took beside it (/proc/stat minus the run's own),
# and the table says when it was too high for the figures to count.
# Environment: PRECISIONS="fp32 bf16" (make bench PRECISION=x runs one),
# STEPS=8, REPS=3, KERNELS=1, PYTORCH=1 (0 skips PyTorch's rows),
# LLMC_CPU_ISA (caps our kernels and the peaks; PyTorch runs as it is).
set -u
cd "$(dirname "$0")/.."
STEPS=${STEPS:-8}; REPS=${REPS:-3}; PRECISIONS=${PRECISIONS:-"fp32 bf16"}; PYTORCH=${PYTORCH:-1}
PY=/usr/bin/python3
mkdir -p build
prog() { [ "$1" = bf16 ] && echo ./train_gpt_cpu_bf16 || echo ./train_gpt_cpu; }
ncores=$(nproc)
echo "machine: $ncores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); ISA flags: $(grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A PEAK
gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. -DLLMC_BF16 dev/bench_kernels.c -ldnnl -lm -o build/bench_kernels_bf16 || exit 1
gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. ${BLAS_CFLAGS:-} dev/bench_kernels.c ${BLAS_LIBS:--lopenblas} -lm -o build/bench_kernels || exit 1
out32=$(./build/bench_kernels peak) || exit 1
out16=$(./build/bench_kernels_bf16 peak) || exit 1
echo "$out32" | grep -E "^(cpu|peak)"
echo "$out16" | grep -E "^peak bf16-"
peak_of() { echo "$1" | awk -v k="$2" '$1 == "peak" && $2 == k {print $3}'; }
PEAK[ours-fp32]=$(peak_of "$out32" fp32-program)
PEAK[ours-bf16]=$(peak_of "$out16" bf16-program)
PEAK[pytorch-fp32]=${PEAK[ours-fp32]}
pb=$(peak_of "$out16" amx); pbn=amx
awk -v x="${pb:-0}" 'BEGIN {exit !(x > 0)}' || { pb=$(peak_of "$out16" avx512_bf16); pbn=avx512_bf16; }
awk -v x="${pb:-0}" 'BEGIN {exit !(x > 0)}' || { pb=${PEAK[ours-fp32]}; pbn="fp32 (no bf16 instructions)"; }
PEAK[pytorch-bf16]=$pb
echo "peaks used: ours-fp32 and pytorch-fp32 ${PEAK[ours-fp32]}, ours-bf16 ${PEAK[ours-bf16]}, pytorch-bf16 ${PEAK[pytorch-bf16]} ($pbn) GFLOP/s"

# timed <logfile> cmd...: runs cmd, sets OTHER to the share of the machine
# (0..1) that other processes used meanwhile
busy_jiffies() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
timed() {
  local log=$1; shift
  local b0 b1 t
  b0=$(busy_jiffies)
  t=$( { TIMEFORMAT='%R %U %S'; time "$@" > "$log" 2>&1; } 2>&1 )
  b1=$(busy_jiffies)
  OTHER=$(echo "$t" | awk -v d=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" -v n="$ncores" \
    '{o = d / hz - ($2 + $3); if (o < 0) o = 0; printf "%.3f", o / ($1 * n)}')
}
flops_per_token() { # L C T: 6*Psi + 12*L*C*T, Psi of GPT-2 with Vp = 50304, maxT = 1024
  awk -v L="$1" -v C="$2" -v T="$3" 'BEGIN {psi = 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C; printf "%.6g", 6 * psi + 12 * L * C * T}'
}
rows=()
worst_other=0
printf "\n%-6s %-13s %9s %9s %9s %9s %7s %7s  %s\n" config row "ms min" "ms med" "tok/s" "GFLOP/s" "% peak" "other" "(REPS=$REPS runs of $STEPS steps; other: CPU share of other processes)"
for cfg in "d6|6 6 384 4 256" "124M|12 12 768 4 64"; do
  name=${cfg%%|*}; read -r L NH C B T <<< "${cfg#*|}"
  fpt=$(flops_per_token "$L" "$C" "$T")
  kinds=""
  for p in $PRECISIONS; do kinds="$kinds ours-$p"; done
  [ "$PYTORCH" = 1 ] && for p in $PRECISIONS; do kinds="$kinds pytorch-$p"; done
  for kind in $kinds; do
    ms=(); oth=0
    for r in $(seq "$REPS"); do
      case $kind in
        ours-*) timed build/bench_run.log "$(prog "${kind#ours-}")" -e "d$L" --heads "$NH" --channels "$C" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0
                m=$(awk '/^average/ {print $2}' build/bench_run.log) ;;
        pytorch-*) timed build/bench_run.log $PY dev/bench_pytorch.py --layers "$L" --heads "$NH" --channels "$C" -b "$B" -t "$T" --steps "$STEPS" --dtype "${kind#pytorch-}"
                m=$(awk '$1 == "pytorch" {print $4}' build/bench_run.log) ;;
      esac
      [ -n "$m" ] || { echo "$kind $name failed:"; tail -3 build/bench_run.log; continue 2; }
      ms+=("$m")
      oth=$(awk -v a="$oth" -v b="$OTHER" 'BEGIN {print (b > a ? b : a)}')
    done
    sorted=($(printf "%s\n" "${ms[@]}" | sort -g))
    min=${sorted[0]}; med=${sorted[$(( (${#sorted[@]} - 1) / 2 ))]}
    line=$(awk -v n="$name" -v k="$kind" -v mn="$min" -v md="$med" -v tok=$((B * T)) -v f="$fpt" -v pk="${PEAK[$kind]:-0}" -v o="$oth" 'BEGIN {
      ts = tok / (mn / 1000); g = ts * f / 1e9
      printf "%-6s %-13s %9.1f %9.1f %9.0f %9.1f %6.1f%% %6.0f%%", n, k, mn, md, ts, g, (pk > 0 ? 100 * g / pk : 0), 100 * o }')
    echo "$line"
    rows+=("$line")
    worst_other=$(awk -v a="$worst_other" -v b="$oth" 'BEGIN {print (b > a ? b : a)}')
  done
done
echo
echo "ours / PyTorch (tokens/s, best runs):"
for r in "${rows[@]}"; do echo "$r"; done | awk '{tok[$1 " " $2] = $5} END {
  for (k in tok) { split(k, a, " "); if (a[2] ~ /^ours-/) { p = a[1] " pytorch-" substr(a[2], 6); if (p in tok && tok[p] > 0) printf "  %-6s %-10s %.2fx\n", a[1], substr(a[2], 6), tok[k] / tok[p] } } }' | sort
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if awk -v o="$worst_other" 'BEGIN {exit !(o > 0.10)}'; then
  echo "WARNING: other processes used up to $(awk -v o="$worst_other" 'BEGIN {printf "%.0f", 100 * o}')% of the machine during a run: these figures do not count; rerun on a quiet machine"
else
  echo "other processes used at most $(awk -v o="$worst_other" 'BEGIN {printf "%.0f", 100 * o}')% of the machine during any run: the figures count"
fi
if [ "${KERNELS:-1}" = 1 ]; then
  for p in $PRECISIONS; do
    echo; echo "=== kernels, $p"
    if [ "$p" = bf16 ]; then ./build/bench_kernels_bf16; else ./build/bench_kernels; fi
  done
fi
