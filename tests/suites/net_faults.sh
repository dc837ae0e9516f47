#!/usr/bin/env bash
# Faults a cluster really has, on the simulated 2-node cluster
# (scripts/cluster.sh), each under an outer timeout so that a hang is a
# failure, never a long wait:
#  1. a cut link (cluster.sh link NODE down: no packet, no reset) in the
#     middle of training, at stage 3 with the communication thread and at
#     stage 1 with --overlap 0: every live rank ends within
#     --collective-timeout (10 s here) + 10 s with one line naming the
#     collective, unit, step and the ranks and node it waited for; the
#     ranks behind the cut say the same once the link is back; the job exits
#     non-zero; the last checkpoint is intact (bitwise the uninterrupted
#     run's) and -y 1 on the remaining node (2 ranks instead of 4, the same
#     global batch) continues bitwise as a resume of that checkpoint at 2
#     ranks does;
#  2. a lost node (kill -9 of its ranks): the job ends within 15 s, mpirun
#     names a lost rank and its node; the time is printed;
#  3. a straggler (a busy loop on node 1's cpu): --straggler-report names
#     rank 1 (node 1); without it, no rank is named.
# Needs root (else skipped and counted; a failure when CI=true).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
cannot_run() {
  if [ "${CI:-}" = true ]; then bad "network faults: $1"; else skip "network faults: skipped ($1)"; fi
  summary; exit
}
[ "$(id -u)" = 0 ] || cannot_run "needs root: network namespaces"
unshare --net --uts true 2>/dev/null || cannot_run "needs network/UTS namespaces"
[ "$(nproc)" -ge 2 ] || cannot_run "needs 2 cpus (one per node)"
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
NAME=llmcnet
CL="scripts/cluster.sh --name $NAME"
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
HOG=""; JOB=""
cleanup() {
  [ -n "$HOG" ] && kill "$HOG" 2>/dev/null
  [ -n "$JOB" ] && kill "$JOB" 2>/dev/null
  $CL down >/dev/null 2>&1; rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
$CL up 2 >/dev/null 2>&1 || { bad "cluster.sh up 2"; summary; exit 1; }
DATA="-i data/brown/brown_train_*.bin -v 0 -s 0"
TINY="-e d2 -b 2 -t 64 -d 512"
TO=10

wait_for() { # file regex seconds: 0 when a line matching regex appears in time
  local i
  for ((i = 0; i < $3 * 10; i++)); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# --- 1. a cut link
# the reference: the same run uninterrupted to step 10 (4 ranks on one node = 2x2, bitwise: tests/suites/cluster.sh)
timeout 120 $MPIRUN -np 4 ./train_gpt_cpu $DATA $TINY -z 3 -x 10 -n 5 -o "$tmp/ref" > "$tmp/ref.log" 2>&1 || bad "the reference run (exit $?)"
cut_run() { # label zero extra...
  local label=$1 z=$2; shift 2
  local out="$tmp/$label.out"
  rm -rf "$tmp/$label"
  timeout 200 $CL run -np 4 --map-by ppr:2:node -- ./train_gpt_cpu $DATA $TINY -z $z -x 400 -n 5 -o "$tmp/$label" \
    --collective-timeout $TO "$@" > "$out" 2>&1 &
  JOB=$!
  if ! wait_for "$out" "^step +12/" 90; then bad "$label: never reached step 12"; tail -5 "$out"; kill $JOB; JOB=""; return 1; fi
  local t0; t0=$(date +%s.%N)
  $CL link $NAME-node1 down >/dev/null
  # (the list names node 1's ranks; a rank of node 0 that timed out first can be in it too)
  local re="^error \(rank [01], node $NAME-node0\): [a-z -]+( of unit [0-9]+)? \(step [0-9]+\) did not complete in $TO s: no data from ranks? .*[0-9] \(node $NAME-node1\)"
  local ok_live=1 i
  for i in 0 1; do
    wait_for "$out" "${re/\[01\]/$i}" $((TO + 10)) || ok_live=0
  done
  local dt; dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ $ok_live = 1 ]; then ok "$label: both live ranks (node 0) ended $dt s after the cut (timeout $TO s): $(grep -m1 "^error (rank 0" "$out")"
  else bad "$label: the live ranks did not report within $((TO + 10)) s"; tail -6 "$out"; fi
  $CL link $NAME-node1 up >/dev/null
  local t1=$SECONDS
  wait $JOB; local rc=$?; JOB=""
  local re2="^error \(rank [23], node $NAME-node1\): .* did not complete in $TO s: no data from ranks? .*\(node $NAME-node0\)"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((SECONDS - t1)) -le 60 ] && [ "$(grep -cE "$re2" "$out")" = 2 ]; then
    ok "$label: the link back, the ranks behind the cut said the same (2 lines), the job exited $rc in $((SECONDS - t1)) s"
  else bad "$label: after the link came back: exit $rc after $((SECONDS - t1)) s, $(grep -cE "$re2" "$out") lines from node 1"; tail -8 "$out"; fi
  # (the state's 1024-byte header records -x, 400 here and 10 in the reference: the rest is compared)
  if [ -s "$tmp/$label/model_00000010.bin" ] && cmp -s "$tmp/$label/model_00000010.bin" "$tmp/ref/model_00000010.bin" \
     && cmp -s -i 1024 "$tmp/$label/state_00000010.bin" "$tmp/ref/state_00000010.bin" && ! ls "$tmp/$label"/*.tmp >/dev/null 2>&1; then
    ok "$label: checkpoint 10 intact (model and state bitwise the uninterrupted run's), no partial file"
  else bad "$label: checkpoint 10 differs from the uninterrupted run's, is missing, or a .tmp is left"; ls "$tmp/$label"; fi
}
cut_run cut-z3 3
cut_run cut-z1-overlap0 1 --overlap 0

# resume on the remaining node: 2 ranks, the same global batch (-d 512: 2 micro-steps)
last=$(ls "$tmp/cut-z3"/model_*.bin | sed 's/.*model_0*\([0-9]*\)\.bin/\1/' | sort -n | tail -1)
mkdir -p "$tmp/fresh" && cp "$tmp/cut-z3/model_$(printf %08d "$last").bin" "$tmp/cut-z3/state_$(printf %08d "$last").bin" "$tmp/fresh/"
end=$((last + 4))
timeout 120 $CL run -np 2 --host $NAME-node0:2 -- ./train_gpt_cpu $DATA $TINY -z 3 -x $end -y 1 -o "$tmp/cut-z3" > "$tmp/resume.log" 2>&1; rc1=$?
timeout 120 $MPIRUN -np 2 ./train_gpt_cpu $DATA $TINY -z 3 -x $end -y 1 -o "$tmp/fresh" > "$tmp/resume2.log" 2>&1; rc2=$?
e=$(printf %08d $end)
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -q "^resumed from step $last" "$tmp/resume.log" && cmp -s "$tmp/cut-z3/model_$e.bin" "$tmp/fresh/model_$e.bin"; then
  ok "-y 1 on the remaining node (2 ranks): resumed from step $last to $end, bitwise a resume of that checkpoint at 2 ranks"
else bad "resume on the remaining node: exit $rc1 / $rc2; $(grep -m1 -E '^resum|^error' "$tmp/resume.log")"; fi

# --- 2. a lost node
out="$tmp/lost.out"
timeout 120 $CL run -np 4 --map-by ppr:2:node -- ./train_gpt_cpu $DATA $TINY -z 3 -x 400 --collective-timeout 30 > "$out" 2>&1 &
JOB=$!
if wait_for "$out" "^step +8/" 90; then
  pids=$(for p in $(ip netns pids $NAME-node1); do [ "$(cat /proc/$p/comm 2>/dev/null)" = train_gpt_cpu ] && echo "$p"; done)
  t0=$(date +%s.%N)
  [ -n "$pids" ] && kill -9 $pids
  wait $JOB; rc=$?; JOB=""
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if [ -n "$pids" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && awk -v d="$dt" 'BEGIN { exit !(d < 15) }' \
     && grep -qE "process rank [23] with PID [0-9]+ on node $NAME-node1 exited on signal 9" "$out"; then
    ok "a lost node (kill -9 of the $(echo $pids | wc -w) ranks on node 1): the job ended in $dt s (exit $rc): $(grep -oE "process rank [23] with PID [0-9]+ on node $NAME-node1 exited on signal 9" "$out" | head -1)"
  else bad "a lost node: exit $rc after $dt s; pids '$pids'"; tail -6 "$out"; fi
else bad "lost node: never reached step 8"; kill $JOB; JOB=""; fi

# --- 3. a straggler
srun_() { timeout 120 $CL run -np 2 --map-by ppr:1:node -- ./train_gpt_cpu $DATA -e d2 -b 2 -t 64 -z 1 -x 8 --straggler-report 1 2>&1; }
o=$(srun_)
base=$(grep "^straggler:" <<<"$o")
cpu1=$(sed -n 's/^cpus1=//p' /run/llmc-cluster/$NAME/state)
taskset -c "$cpu1" bash -c 'while :; do :; done' &
HOG=$!
o2=$(srun_)
kill $HOG; wait $HOG 2>/dev/null; HOG=""
slow=$(grep "^straggler:" <<<"$o2")
if grep -q "^straggler: rank 1 (node $NAME-node1): the others waited" <<<"$slow"; then ok "a busy loop on node 1's cpu: $slow"
else bad "the straggler report with node 1 slowed: '$slow'"; grep -A3 "^straggler report" <<<"$o2"; fi
if grep -q "^straggler: none" <<<"$base"; then ok "without it: $base"; else bad "no slow node, but: '$base'"; grep -A3 "^straggler report" <<<"$o"; fi

# --- bad flag
o=$(./train_gpt_cpu --collective-timeout -1 2>&1); rc=$?
[ $rc = 1 ] && grep -q "^error: flag --collective-timeout: '-1'" <<<"$o" && ok "--collective-timeout -1: one error naming the flag" || bad "--collective-timeout -1: exit $rc: $o"
summary
