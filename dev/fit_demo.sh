#!/usr/bin/env bash
# fit_demo.sh (make fit-demo): the ZeRO paper's question -- which stage fits
# a node's memory? -- on nodes whose memory is really limited. A simulated
# cluster (scripts/cluster.sh up K --mem M: K network namespaces, each node a
# memory cgroup of M bytes that its MPI daemon and ranks share) runs GPT-2
# 124M (-e d12) in bf16, one rank per node, and M is put between the
# predicted stage-3 and stage-2 peaks of one rank (the trainer's own
# prediction, --estimate with the same -b and -t). Then:
#   1. --estimate: the paper's closed forms beside the full per-rank peaks;
#   2. -z 0, -z 1, -z 2: refused before anything is allocated, naming the
#      node's cgroup and what fits;
#   3. -z 3: trains in M (used / predicted printed at the end);
#   4. -z 0 --fit-check 0: the kernel's OOM killer ends a rank, mpirun ends
#      the job and names the rank and node;
#   5. -z auto: its table and its choice.
# A demonstration, not a test (tests/suites/fit.sh is the test). About 3-4
# minutes on 2 cores. Needs root. Prints one summary table at the end.
#
# Environment: NODES=4, MODEL="-e d12 -b 2 -t 256", PROG=./train_gpt_cpu_bf16,
# STEPS=2, OUT=build/fit_demo (the logs of every run).
set -u
cd "$(dirname "$0")/.." || exit 1
NODES=${NODES:-4}
MODEL=${MODEL:--e d12 -b 2 -t 256}
PROG=${PROG:-./train_gpt_cpu_bf16}
STEPS=${STEPS:-2}
OUT=${OUT:-build/fit_demo}
NAME=fitdemo
CL="scripts/cluster.sh --name $NAME"
[ "$(id -u)" = 0 ] || { echo "error: fit_demo.sh: needs root (scripts/cluster.sh: network namespaces, memory cgroups)" >&2; exit 1; }
[ -x "$PROG" ] || { echo "error: fit_demo.sh: $PROG not built (make all)" >&2; exit 1; }
mkdir -p "$OUT"
trap '$CL down >/dev/null 2>&1' EXIT
export OMP_NUM_THREADS=1
DATA="-i data/brown/brown_train_*.bin -j data/brown/brown_val_*.bin"
cpu=$(bash dev/cpu_name.sh); isa=$(grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "fit demo: $PROG $MODEL, $NODES nodes x 1 rank, $STEPS steps; CPU: $cpu (${isa:-no AVX-512/AMX})"

# 1. the estimator with a budget: the full peaks at N = NODES
est=$($PROG --estimate $MODEL --ranks "$NODES" --memory-limit 1T 2>&1)
P=$(sed -n 's/.*peaks at N = [0-9]*: \(.*\); offloaded.*/\1/p' <<<"$est")
P2=$(sed 's/.*2: \([0-9.e+-]*\) GB.*/\1/' <<<"$P"); P3=$(sed 's/.*3: \([0-9.e+-]*\) GB.*/\1/' <<<"$P")
MEM=$(awk -v a="$P3" -v b="$P2" 'BEGIN { printf "%.0f", (a + (b - a) * 0.5) * 1e9 }')
echo "predicted per-rank peaks at N = $NODES: $P; node memory M = $MEM B (halfway between stages 3 and 2)"
$PROG --estimate $MODEL --ranks "$NODES" --memory-limit "$MEM" | tee "$OUT/estimate.txt"
echo
$CL down >/dev/null 2>&1
$CL up "$NODES" --mem "$MEM" --cpus all || exit 1
run() { # label args...
  local label=$1; shift
  local t0=$(date +%s)
  timeout 900 $CL run -np "$NODES" --map-by ppr:1:node -- $PROG $DATA -v 0 -s 0 -x "$STEPS" $MODEL "$@" > "$OUT/$label.log" 2>&1
  local rc=$? dt=$(( $(date +%s) - t0 ))
  local what
  what=$(grep -m1 "^error: " "$OUT/$label.log" | cut -c1-160)
  [ -z "$what" ] && what=$(grep -o "process rank [0-9]* with PID [0-9]* on node [^ ]* exited on signal [0-9]* ([A-Za-z]*)" "$OUT/$label.log" | head -1)
  [ -z "$what" ] && what=$(sed -n 's/^fit check: \(predicted peak .* = [0-9.]*\);.*/\1/p' "$OUT/$label.log")
  local chose; chose=$(sed -n 's/^-z auto: chose \([^:]*\):.*/\1/p' "$OUT/$label.log")
  printf '%-22s rc %-3s %4s s  %s%s\n' "$label" "$rc" "$dt" "${chose:+chose $chose; }" "$what" | tee -a "$OUT/summary.txt"
}
: > "$OUT/summary.txt"
for z in 0 1 2 3; do run "z$z" -z $z; done
run "z0-fit-check-0" -z 0 --fit-check 0
$CL status | tail -$((NODES + 1))
run "auto" -z auto
echo
sed -n '/^-z auto:/,/^-z auto: chose/p' "$OUT/auto.log"
echo
echo "summary (logs in $OUT/):"
cat "$OUT/summary.txt"
