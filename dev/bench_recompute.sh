#!/usr/bin/env bash
# bench_recompute.sh (make bench-recompute): what activation recomputation
# (-r 0..3) costs and saves, measured. For each configuration and -r: the
# ledger's activation bytes and recompute buffers, the predicted per-rank
# peak and the VmHWM the run reached, the step time (the trainer's average
# of steps 2..the last) and its overhead against -r 0. Then one budget between
# the -r 3 and -r 2 peaks of the first configuration: which -r fit it (the
# fit check refuses the others before allocating). A benchmark, not a test
# (tests/suites/recompute.sh is the test): take figures on an idle machine.
#
# Environment: CONFIGS (';'-separated "label|np|steps|flags"), default GPT-2
# 124M B=4 T=1024 on 1 rank (3 steps) and make train's model on 2 ranks (30
# steps: its steps take ~0.1 s, fewer are noise); PROG
# (./train_gpt_cpu_bf16); OUT (build/bench_recompute).
set -u
cd "$(dirname "$0")/.." || exit 1
PROG=${PROG:-./train_gpt_cpu_bf16}
OUT=${OUT:-build/bench_recompute}
CONFIGS=${CONFIGS:-"GPT-2 124M, B=4 T=1024, 1 rank, -z 0|1|3|-e d12 -b 4 -t 1024 -z 0;make train's d2, B=4 T=128, 2 ranks, -z 1|2|30|-e d2 -b 4 -t 128 -z 1"}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
DATA="-i data/brown/brown_train_*.bin -v 0 -s 0"
[ -x "$PROG" ] || { echo "error: bench_recompute.sh: $PROG not built (make all)" >&2; exit 1; }
mkdir -p "$OUT"
cpu=$(bash dev/cpu_name.sh); isa=$(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "bench_recompute: $PROG; CPU: $cpu, $(nproc) cores (${isa:-no AVX-512/AMX})"
field() { sed -n "$2" "$1"; }
first=""
IFS=';' read -r -a cfgs <<<"$CONFIGS"
for cfg in "${cfgs[@]}"; do
  IFS='|' read -r label np steps flags <<<"$cfg"
  echo
  echo "$label ($PROG $flags, $steps steps, the average of steps 2..$steps)"
  printf '  %-4s %15s %15s %15s %13s %13s %11s %9s\n' "-r" "activations MB" "recompute MB" "act+rc MB" "predicted MB" "VmHWM MB" "ms/step" "overhead"
  base=""
  for r in 0 1 2 3; do
    log="$OUT/$(echo "$label" | tr -c 'a-zA-Z0-9' '_')_r$r.log"
    $MPIRUN -np "$np" "$PROG" $DATA $flags -x "$steps" -r $r > "$log" 2>&1 || { echo "  -r $r: failed (see $log)"; continue; }
    act=$(awk '$1 == "activations" { print $2; exit }' "$log")
    rc=$(awk '$1 == "recompute" && $2 == "buffers" { print $4; exit }' "$log"); rc=${rc:-0}
    pred=$(field "$log" 's/^fit check: predicted peak \([0-9.]*\) MB.*/\1/p')
    used=$(field "$log" 's/^fit check: .* used \([0-9.]*\) MB.*/\1/p')
    ms=$(field "$log" 's/^average \([0-9.]*\) ms per optimizer step.*/\1/p')
    [ -z "$base" ] && base=$ms
    printf '  %-4s %15.1f %15.1f %15.1f %13s %13s %11s %8s%%\n' "$r" "$(awk -v a="$act" 'BEGIN{print a/1e6}')" \
      "$(awk -v a="$rc" 'BEGIN{print a/1e6}')" "$(awk -v a="$act" -v b="$rc" 'BEGIN{print (a+b)/1e6}')" "$pred" "$used" "$ms" \
      "$(awk -v a="$ms" -v b="$base" 'BEGIN { printf "%+.1f", 100 * (a / b - 1) }')"
  done
  [ -z "$first" ] && first="$np|$flags"
done

# a budget only -r 3 meets (the first configuration)
IFS='|' read -r np flags <<<"$first"
p2=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB.*/\1/p' "$OUT/$(echo "${cfgs[0]%%|*}" | tr -c 'a-zA-Z0-9' '_')_r2.log")
p3=$(sed -n 's/^memory: predicted peak \([0-9.]*\) GB.*/\1/p' "$OUT/$(echo "${cfgs[0]%%|*}" | tr -c 'a-zA-Z0-9' '_')_r3.log")
LIM=$(awk -v a="$p3" -v b="$p2" 'BEGIN { printf "%.0f", (a + (b - a) / 2) * 1e9 }')
echo
echo "${cfgs[0]%%|*} with --memory-limit $LIM (halfway between the -r 3 peak $p3 GB and the -r 2 peak $p2 GB):"
for r in 0 1 2 3; do
  o=$($MPIRUN -np "$np" "$PROG" $DATA $flags -x 1 -r $r --memory-limit "$LIM" 2>&1); rc=$?
  if [ $rc = 0 ]; then echo "  -r $r: trains ($(sed -n 's/^fit check: \(predicted peak .* = [0-9.]*\);.*/\1/p' <<<"$o"))"
  else echo "  -r $r: refused ($(grep -m1 '^error' <<<"$o" | sed 's/.*needs \([0-9.]* GB per rank\).*/needs \1/'))"; fi
done
