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
# pytorch-fp32 the fp32 FMA peak of the level (AVX-512 or AVX2); the bf16
# program's rows: ours-bf16 (the paths it chooses, llmc/cpu/matmul_choice.h,
# marked "chosen"; the peak of its path, the higher one when the classes
# differ), ours-bf16-fp32 (LLMC_BF16_MATMUL=fp32: the fp32 peak) and
# ours-bf16-prim (LLMC_BF16_MATMUL=primitive: the peak of the instructions
# oneDNN's bf16 primitive runs: AMX tiles, else vdpbf16ps, else fp32 FMAs;
# "unavailable" below AVX-512), a forced row that equals the chosen paths
# is not run again; pytorch-bf16 the best bf16 instruction this CPU has
# (AMX, else AVX512-BF16, else the fp32 peak).
# Rows ours-fp32-inv and ours-bf16-inv: the same runs with --invariant 1
# (layout-invariant training, docs/design.md section 13), and their price
# against the plain rows (INVARIANT=0 skips them).
# Beside ours-fp32 and ours-bf16: the trainer's step against its kernels-only
# step (bench_kernels step, same model, batch and threads, REPS runs).
# Then the optimizer against the memory bandwidth: a STREAM-style triad
# (bench_kernels stream, all threads), the bytes the optimizer streams per
# step (grad norm: g; AdamW: g, m, v, master or p read, m, v, master and p
# written: 32 bytes per parameter in fp32, 30 in bf16), the time those
# bytes take at the triad's rate and the optimizer's time in our rows (the
# trainer's average line); and the targets of issue 31, met or not.
# Then the kernel-level benchmark per precision (matmul per shape, one step
# built from the kernels alone, time per kernel group) unless KERNELS=0.
# Timing means something only on a quiet machine: every run measures the
# CPU time other processes took beside it (/proc/stat minus the run's own),
# and the table says when it was too high for the figures to count.
# Environment: PRECISIONS="fp32 bf16" (make bench PRECISION=x runs one),
# STEPS=8, REPS=3, KERNELS=1, PYTORCH=1 (0 skips PyTorch's rows),
# LLMC_CPU_ISA (caps our kernels and the peaks; PyTorch runs as it is),
# CONFIGS="d6 124M".
set -u
cd "$(dirname "$0")/.."
INVARIANT=${INVARIANT:-1}; STEPS=${STEPS:-8}; REPS=${REPS:-3}; PRECISIONS=${PRECISIONS:-"fp32 bf16"}; PYTORCH=${PYTORCH:-1}; CONFIGS=${CONFIGS:-"d6 124M"}
PY=/usr/bin/python3
mkdir -p build
prog() { [ "$1" = bf16 ] && echo ./train_gpt_cpu_bf16 || echo ./train_gpt_cpu; }
ncores=$(nproc)
echo "machine: $ncores cores, $(bash dev/cpu_name.sh); ISA flags: $(grep -o 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# bench_kernels_bf16 reads the trainer's calibration file only with the trainer's build id (make bench
# passes it): run directly, its kernels-only step and the bf16 program's peak took the rule's paths
# (fp32 below AMX) while the trainer ran the primitive (a Zen 4, 2026-12-07: bf16 "132.5% of peak",
# trainer / kernels 0.54x; through make bench 72.0% and 0.96x)
[ -n "${KERNELS_ID:-}" ] || echo "note: KERNELS_ID is not set (run this through make bench): the bf16 kernels-only step and the bf16 program's peak follow the rule's paths, not the trainer's calibration file"
declare -A PEAK
gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. -DLLMC_BF16 ${KERNELS_ID:+-DLLMC_KERNELS_ID=\"$KERNELS_ID\"} dev/bench_kernels.c -ldnnl -lm -o build/bench_kernels_bf16 || exit 1
gcc -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -I. ${BLAS_CFLAGS:-} dev/bench_kernels.c ${BLAS_LIBS:--lopenblas} -lm -o build/bench_kernels || exit 1
out32=$(./build/bench_kernels peak) || exit 1
out16=$(./build/bench_kernels_bf16 peak) || exit 1
echo "$out32" | grep -E "^(cpu|peak)"
echo "$out16" | grep -E "^(build|peak bf16-)"
stream=$(./build/bench_kernels stream | grep '^stream') || exit 1
echo "$stream"
BW=$(echo "$stream" | awk '{print $3}')
peak_of() { echo "$1" | awk -v k="$2" '$1 == "peak" && $2 == k {print $3}'; }
PEAK[ours-fp32]=$(peak_of "$out32" fp32-program)
PEAK[ours-bf16]=$(peak_of "$out16" bf16-program)
PEAK[ours-bf16-fp32]=$(peak_of "$out16" bf16-fp32-path)
PEAK[ours-bf16-prim]=$(peak_of "$out16" bf16-primitive-path)
PEAK[pytorch-fp32]=${PEAK[ours-fp32]}
PEAK[ours-fp32-inv]=${PEAK[ours-fp32]}
# --invariant 1 runs the linear layers' fixed tiles on the primitive at avx512_bf16 and above (llmc/cpu/matmul_choice.h), else on the fp32-copy path
LEVEL=$(echo "$out32" | awk '$1 == "cpu" {for (i = 1; i < NF; i++) if ($i == "level") {sub(/[^a-z0-9_].*/, "", $(i + 1)); print $(i + 1); exit}}')
case $LEVEL in avx512_bf16|amx) PEAK[ours-bf16-inv]=${PEAK[ours-bf16-prim]} ;; *) PEAK[ours-bf16-inv]=${PEAK[ours-bf16-fp32]} ;; esac
pb=$(peak_of "$out16" amx); pbn=amx
awk -v x="${pb:-0}" 'BEGIN {exit !(x > 0)}' || { pb=$(peak_of "$out16" avx512_bf16); pbn=avx512_bf16; }
awk -v x="${pb:-0}" 'BEGIN {exit !(x > 0)}' || { pb=${PEAK[ours-fp32]}; pbn="fp32 (no bf16 instructions)"; }
PEAK[pytorch-bf16]=$pb
echo "peaks used: ours-fp32 and pytorch-fp32 ${PEAK[ours-fp32]}, ours-bf16 ${PEAK[ours-bf16]} (its chosen paths), ours-bf16-fp32 ${PEAK[ours-bf16-fp32]}, ours-bf16-prim ${PEAK[ours-bf16-prim]}, pytorch-bf16 ${PEAK[pytorch-bf16]} ($pbn) GFLOP/s"
# the chosen paths (the program's start-up line, from its calibration file) and whether the primitive can run
CHOSEN=""; PRIM_OK=0
awk -v x="${PEAK[ours-bf16-prim]:-0}" 'BEGIN {exit !(x > 0)}' && PRIM_OK=1

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
printf "\n%-6s %-14s %9s %9s %9s %9s %7s %7s  %s\n" config row "ms min" "ms med" "tok/s" "GFLOP/s" "% peak" "other" "(REPS=$REPS runs of $STEPS steps; other: CPU share of other processes)"
declare -A OPT PSI KRATIO
for cfg in "d6|6 6 384 4 256" "124M|12 12 768 4 64"; do
  name=${cfg%%|*}; read -r L NH C B T <<< "${cfg#*|}"
  case " $CONFIGS " in *" $name "*) ;; *) continue ;; esac
  fpt=$(flops_per_token "$L" "$C" "$T")
  kinds=""
  for p in $PRECISIONS; do kinds="$kinds ours-$p"; [ "$INVARIANT" = 1 ] && kinds="$kinds ours-$p-inv"; [ "$p" = bf16 ] && kinds="$kinds ours-bf16-fp32 ours-bf16-prim"; done
  [ "$PYTORCH" = 1 ] && for p in $PRECISIONS; do kinds="$kinds pytorch-$p"; done
  for kind in $kinds; do
    env=()
    case $kind in
      ours-bf16-fp32) case $CHOSEN in fp32) printf "%-6s %-14s %s\n" "$name" "$kind" "= ours-bf16 (the chosen paths: fp32 for every class)"; continue ;; esac
                      env=(LLMC_BF16_MATMUL=fp32) ;;
      ours-bf16-prim) [ $PRIM_OK = 1 ] || { printf "%-6s %-14s %s\n" "$name" "$kind" "primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE)"; continue; }
                      case $CHOSEN in primitive) printf "%-6s %-14s %s\n" "$name" "$kind" "= ours-bf16 (the chosen paths: the primitive for every class)"; continue ;; esac
                      env=(LLMC_BF16_MATMUL=primitive) ;;
    esac
    inv=(); case $kind in *-inv) inv=(--invariant 1) ;; esac
    ms=(); oth=0; opt=()
    for r in $(seq "$REPS"); do
      case $kind in
        ours-*) p=${kind#ours-}; p=${p%%-*}
                timed build/bench_run.log env "${env[@]}" "$(prog "$p")" -e "d$L" --heads "$NH" --channels "$C" -b "$B" -t "$T" -x "$STEPS" -v 0 -s 0 "${inv[@]}"
                m=$(awk '/^average/ {print $2}' build/bench_run.log)
                opt+=("$(sed -n 's/^average .* the optimizer (.*) \([0-9.]*\) ms$/\1/p' build/bench_run.log)")
                PSI[$name]=$(sed -n 's/^model: .*, \([0-9]*\) parameters, .*/\1/p' build/bench_run.log)
                if [ "$kind" = ours-bf16 ] && [ -z "$CHOSEN" ]; then
                  mline=$(grep -m1 '^matmul:' build/bench_run.log)
                  case $mline in *"fp32-copy"*"every class"*|*"fp32 sgemm on exact fp32 copies"*"every class"*) CHOSEN=fp32 ;;
                                 *"primitive"*"every class"*) CHOSEN=primitive ;; *) CHOSEN="per class" ;; esac
                  echo "       (ours-bf16 runs the chosen paths: ${mline#matmul: })"
                fi ;;
        pytorch-*) timed build/bench_run.log $PY dev/bench_pytorch.py --layers "$L" --heads "$NH" --channels "$C" -b "$B" -t "$T" --steps "$STEPS" --dtype "${kind#pytorch-}"
                m=$(awk '$1 == "pytorch" {print $4}' build/bench_run.log) ;;
      esac
      [ -n "$m" ] || { echo "$kind $name failed:"; tail -3 build/bench_run.log; continue 2; }
      ms+=("$m")
      oth=$(awk -v a="$oth" -v b="$OTHER" 'BEGIN {print (b > a ? b : a)}')
    done
    sorted=($(printf "%s\n" "${ms[@]}" | sort -g))
    min=${sorted[0]}; med=${sorted[$(( (${#sorted[@]} - 1) / 2 ))]}
    case $kind in ours-fp32|ours-bf16) OPT[$name,${kind#ours-}]=$(printf "%s\n" "${opt[@]}" | sort -g | head -1) ;; esac
    mark=""; [ "$kind" = ours-bf16 ] && mark="  <- chosen ($CHOSEN)"
    # the trainer against its own kernels: the kernels-only step of the same
    # model, batch and threads (bench_kernels step: the same kernels called in
    # a plain loop, no engine, no data, no logging), REPS runs, the mean of
    # STEPS-1 steps after a warm-up, the fastest run
    case $kind in ours-fp32|ours-bf16)
      kb=./build/bench_kernels; [ "$kind" = ours-bf16 ] && kb=./build/bench_kernels_bf16
      km=()
      for r in $(seq "$REPS"); do
        timed build/bench_kern.log "$kb" step "$L" "$NH" "$C" "$B" "$T" $((STEPS - 1))
        k=$(sed -n 's/.*; mean step \([0-9.]*\) ms$/\1/p' build/bench_kern.log)
        [ -n "$k" ] && km+=("$k")
        oth=$(awk -v a="$oth" -v b="$OTHER" 'BEGIN {print (b > a ? b : a)}')
      done
      if [ ${#km[@]} -gt 0 ]; then
        kmin=$(printf "%s\n" "${km[@]}" | sort -g | head -1)
        KRATIO[$name,${kind#ours-}]=$(awk -v t="$min" -v k="$kmin" 'BEGIN {printf "%.1f ms, kernels-only %.1f ms: %.2fx", t, k, t / k}')
      fi ;;
    esac
    line=$(awk -v n="$name" -v k="$kind" -v mn="$min" -v md="$med" -v tok=$((B * T)) -v f="$fpt" -v pk="${PEAK[$kind]:-0}" -v o="$oth" 'BEGIN {
      ts = tok / (mn / 1000); g = ts * f / 1e9
      printf "%-6s %-14s %9.1f %9.1f %9.0f %9.1f %6.1f%% %6.0f%%", n, k, mn, md, ts, g, (pk > 0 ? 100 * g / pk : 0), 100 * o }')
    echo "$line$mark"
    rows+=("$line")
    worst_other=$(awk -v a="$worst_other" -v b="$oth" 'BEGIN {print (b > a ? b : a)}')
  done
done
echo
echo "ours / PyTorch (tokens/s, best runs):"
for r in "${rows[@]}"; do echo "$r"; done | awk '{tok[$1 " " $2] = $5} END {
  for (k in tok) { split(k, a, " "); if (a[2] ~ /^ours-(fp32|bf16)$/) { p = a[1] " pytorch-" substr(a[2], 6); if (p in tok && tok[p] > 0) printf "  %-6s %-10s %.2fx\n", a[1], substr(a[2], 6), tok[k] / tok[p] } } }' | sort
echo "price of --invariant 1 (tokens/s of the plain row / of the -inv row, best runs; 1.10 = 10% slower):"
for r in "${rows[@]}"; do echo "$r"; done | awk '{tok[$1 " " $2] = $5} END {
  for (k in tok) { split(k, a, " "); if (a[2] ~ /-inv$/) { p = a[1] " " substr(a[2], 1, length(a[2]) - 4); if (p in tok && tok[k] > 0) printf "  %-6s %-14s %.3fx\n", a[1], a[2], tok[p] / tok[k] } } }' | sort
echo "the trainer's step / its kernels-only step (dev/bench_kernels.c step: the same model, batch and threads; target: at most 1.05x):"
for name in $CONFIGS; do for p in $PRECISIONS; do [ -n "${KRATIO[$name,$p]:-}" ] && printf "  %-6s %-5s %s\n" "$name" "$p" "${KRATIO[$name,$p]}"; done; done
echo "ours bf16 / ours fp32 (tokens/s, best runs):"
for r in "${rows[@]}"; do echo "$r"; done | awk '{tok[$1 " " $2] = $5} END {
  for (k in tok) { split(k, a, " "); if (a[2] ~ /^ours-bf16/ && (a[1] " ours-fp32") in tok) printf "  %-6s %-14s %.2fx\n", a[1], a[2], tok[k] / tok[a[1] " ours-fp32"] } }' | sort
echo
echo "optimizer (grad norm + clip + AdamW, one rank) against the memory bandwidth: stream triad $BW GB/s"
for name in $CONFIGS; do
  for p in $PRECISIONS; do
    o=${OPT[$name,$p]:-}; psi=${PSI[$name]:-}
    [ -n "$o" ] && [ -n "$psi" ] || continue
    awk -v n="$name" -v p="$p" -v o="$o" -v psi="$psi" -v bw="$BW" 'BEGIN {
      bpp = (p == "fp32") ? 32 : 30; bytes = psi * bpp; t = bytes / (bw * 1e9) * 1e3
      printf "  %-6s %-5s %d params x %d bytes = %.3f GB per step: %.1f ms at %.1f GB/s; measured %.1f ms = %.2fx that (target: within 1.3x)\n", n, p, psi, bpp, bytes / 1e9, t, bw, o, o / t }'
  done
done
echo
echo "targets (issue 31; figures of this run):"
for r in "${rows[@]}"; do echo "$r"; done | awk -v prim="$PRIM_OK" -v hasbf="$(grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo 1 || echo 0)" '
  {tok[$1 " " $2] = $5; pct[$1 " " $2] = $7 + 0}
  function say(what, ok, fig) { printf "  %-58s %-8s %s\n", what, ok ? "met" : "NOT MET", fig }
  END {
    for (c = 1; c <= 2; c++) { n = c == 1 ? "d6" : "124M"
      if ((n " ours-fp32") in tok && (n " ours-bf16") in tok) {
        x = tok[n " ours-bf16"] / tok[n " ours-fp32"]
        if (hasbf) say(n ": bf16 program >= 1.8x the fp32 program", x >= 1.8, sprintf("%.2fx", x))
        else printf "  %-58s %-8s %.2fx (this CPU has neither AVX512-BF16 nor AMX: the target does not apply)\n", n ": bf16 program >= 1.8x the fp32 program", "n/a", x }
      for (q = 1; q <= 2; q++) { pr = q == 1 ? "fp32" : "bf16"
        if ((n " ours-" pr) in tok && (n " pytorch-" pr) in tok) { x = tok[n " ours-" pr] / tok[n " pytorch-" pr]; say(n ": ours " pr " >= 2x PyTorch " pr, x >= 2, sprintf("%.2fx", x)) } }
      if ((n " ours-fp32") in pct) { t = n == "d6" ? 75 : 70; say(n ": fp32 >= " t "% of the fp32 peak", pct[n " ours-fp32"] >= t, pct[n " ours-fp32"] "%") }
      if ((n " ours-bf16") in pct) say(n ": bf16 >= 65% of the peak of its path", pct[n " ours-bf16"] >= 65, pct[n " ours-bf16"] "%") } }'
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
