#!/usr/bin/env bash
# make bench-offload: what --offload-optimizer disk:DIR costs and saves on the
# CPU build (a benchmark, not a test). For d6 (B=4, T=256) and GPT-2 124M
# (d12, B=4, T=64), the same short run with the optimizer states in memory
# and on disk; per run: peak resident memory of rank 0 (VmHWM, as the
# trainer prints it), ms per step (mean of steps 2..STEPS), and with offload
# the bytes the optimizer step moved to and from the scratch file, the I/O
# thread's throughput (bytes / time inside pread/pwrite) and the time the
# steps waited for reads. The expected drop of VmHWM is the optimizer shard
# moved to disk (8 Psi/N bytes in fp32: m, v; 12 Psi/N with a master copy)
# minus the two streaming buffers, both taken from the run's memory ledger.
#   bash dev/bench_offload.sh                 (from the repository root)
# Environment: STEPS (default 4), NP ranks (1), ZERO stage (1), DIR for the
# scratch files (build/offload_scratch), CONFIGS ("d6 d12"), EXTRA flags.
# The file goes through the page cache (no O_DIRECT): on a machine with free
# RAM the "disk" I/O is mostly memory copies; the I/O figures are what this
# machine's file system gave, not a device's bandwidth.
set -u
cd "$(dirname "$0")/.."
STEPS=${STEPS:-4}; NP=${NP:-1}; ZERO=${ZERO:-1}; DIR=${DIR:-build/offload_scratch}; CONFIGS=${CONFIGS:-d6 d12}; EXTRA=${EXTRA:-}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
mkdir -p "$DIR"
PROG=${PROG:-./train_gpt_cpu}
[ -x "$PROG" ] || { echo "build $PROG first (make all)"; exit 1; }
threads=$(( $(nproc) / NP )); [ $threads -lt 1 ] && threads=1
echo "machine: $(nproc) cores ($(bash dev/cpu_name.sh)), $(free -g | awk '/^Mem/{print $2}') GiB RAM;" \
     "scratch DIR $DIR on $(df -T "$DIR" | awk 'NR==2{print $2, $1}'); $NP rank(s) x $threads threads, -z $ZERO, $STEPS steps; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "| model | offload | VmHWM rank 0 (MB) | ms / step | disk read + written / step (MB) | I/O thread MB/s | wait for reads / step (ms) |\n"
printf "|---|---|---|---|---|---|---|\n"
for cfg in $CONFIGS; do
  case $cfg in
    d6) flags="-e d6 -b 4 -t 256" ;;
    d12) flags="-e d12 -b 4 -t 64" ;;
    *) flags="-e $cfg -b 4 -t 64" ;;
  esac
  declare -A hwm
  for mode in none disk; do
    off=""; [ $mode = disk ] && off="--offload-optimizer disk:$DIR"
    out=$(OMP_NUM_THREADS=$threads $MPIRUN -np $NP $PROG $flags -z $ZERO -x $STEPS -v 0 -s 0 $off $EXTRA 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then echo "run $cfg $mode failed (exit $rc):"; echo "$out" | tail -5; continue; fi
    res=$(echo "$out" | sed -n 's/.*process resident \([0-9.]*\) MB on rank 0.*/\1/p')
    ms=$(echo "$out" | sed -n 's/^average \([0-9.]*\) ms.*/\1/p')
    hwm[$mode]=$res
    if [ $mode = disk ]; then
      per=$(echo "$out" | awk '/disk -> memory|memory -> disk/{s+=$7} END{printf "%.1f", s/1e6}')
      mbs=$(echo "$out" | sed -n 's/.*in pread\/pwrite (\([0-9.]*\) MB\/s).*/\1/p')
      wait=$(echo "$out" | sed -n 's/.*waited [0-9.]* s for reads (\([0-9.]*\) s per step).*/\1/p')
      wait=$(awk -v w="${wait:-0}" 'BEGIN{printf "%.1f", w*1000}')
      # the ledger: optimizer bytes on disk (model-state row, disk column) and the streaming buffers (memory column)
      ondisk=$(echo "$out" | awk '/^  = model states/{print $6; exit}')
      bufs=$(echo "$out" | awk '/^  optimizer streaming buffers/{print $4; exit}')
      printf "| %s | disk | %s | %s | %s | %s | %s |\n" "$cfg" "$res" "$ms" "$per" "${mbs:--}" "$wait"
      awk -v a="${hwm[none]:-0}" -v b="$res" -v d="${ondisk:-0}" -v u="${bufs:-0}" -v c="$cfg" \
        'BEGIN{printf "|   | drop | %.1f | | expected %.1f MB = %.1f MB optimizer states on disk - %.1f MB streaming buffers | | |\n", a-b, (d-u)/1e6, d/1e6, u/1e6}'
    else
      printf "| %s | none | %s | %s | - | - | - |\n" "$cfg" "$res" "$ms"
    fi
  done
done
