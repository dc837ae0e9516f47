#!/usr/bin/env bash
# A job that loses a node finishes by itself, on the data order it had:
#  1. the data order across rank counts and shard boundaries (no cluster):
#     a 4-rank run (-b 2, -d 512, T=64) over 6 train shards of 1400 tokens
#     (2 steps each; a shard switch every second step) writes checkpoint 4;
#     resumed on 2 ranks (2 micro-steps) and on 1 rank (4 micro-steps), the
#     next 4 steps, which cross two shard boundaries, print the losses of
#     the uninterrupted 4-rank run (main.log, 6 decimals: within 1e-6, one
#     unit of the last printed digit), shuffled and in file order (before,
#     the shard switch was decided per global micro-batch and the resumed
#     runs read other sequences from step 7 on);
#  2. Slurm (scripts/cluster.sh up 2 --slurm): sbatch --no-kill
#     run_slurm.sbatch with ELASTIC=1, 2 nodes x 2 ranks, -x 30 -n 5; node
#     1's link is cut at step 12: the script prints one line ("elastic: lost
#     NODE-node1 at step K; continuing on 1 node (2 ranks) from checkpoint
#     S"), relaunches on node 0 with -y 1 and the same -d, and completes
#     with checkpoint 30; the time from the cut to the next step is printed.
#     With the trainer's --invariant 1 (probed in its -h; INVARIANT_FLAG
#     overrides) checkpoint 30 must be cmp-equal to an uninterrupted 4-rank
#     run's and to an uninterrupted 2-rank run's; without it, the losses of
#     every step equal the uninterrupted 4-rank run's within 1e-5 relative
#     (the bound of docs/resume.md for fp32 across rank counts; measured
#     here: printed below), and the test says which;
#  3. the same on a hostfile (scripts/run_multinode.sh ELASTIC=1, mpirun),
#     against the same uninterrupted runs;
#  4. HSDP (--shard-group 2: each node one shard group, a whole replica of
#     the sharded state), Slurm as 2., -x 20 -n 10, node 1's link cut after
#     step 12: the ranks of node 0 write checkpoint S, the last step both
#     completed (llmc/rescue.h: "rescue: wrote checkpoint S"), the relaunch
#     continues from it ("... from checkpoint S (written by the survivors;
#     ..."), and checkpoint S is cmp-equal to the one an uninterrupted
#     4-rank run writes at S (-n S), and checkpoint 20 to that run's S
#     resumed on 2 ranks, the surviving layout;
#  5. (only when ELASTIC_CASES names it: about 3 min more) HSDP on a
#     hostfile at the default --collective-timeout (60 s): the launcher's
#     kill delay of (60 + 20) / 2 s leaves the survivors the time to write
#     checkpoint S before mpirun's SIGKILL, and the relaunch goes on from it.
#  6. (issue 49 item 2) 3 and 4 nodes on a hostfile (a second simulated
#     cluster, NAME6), one rank per node, one node lost after step 12 (`node
#     NAME down`: every process killed, and its link cut, so that its probe
#     fails: a node that lost power): the job goes on by itself on a layout
#     of the survivors that keeps -d, and completes with checkpoint 30. 4
#     nodes (-d 512, --invariant 1 when the trainer has it): 2 ranks, -b 2, 2
#     micro-steps, one survivor idle; checkpoint 30 cmp-equal to the
#     uninterrupted 4- and 2-rank runs' (compare_final). 3 nodes (-d 384, no
#     --invariant: 3 ranks): 2 ranks, -b 1, 3 micro-steps; losses within
#     1e-5 relative of an uninterrupted 3-rank run's. ELASTIC_LOSE lists the
#     cases as K:I (K nodes, node I lost); default 4:0 (rank 0's node, whose
#     -o lock the relaunch takes over when its process outlives the cut);
#     dev/elastic_matrix.sh runs 3:0 3:1 3:2 4:0 4:1 4:3. ELASTIC_VIA=slurm
#     runs them as sbatch --no-kill jobs of run_slurm.sbatch instead; there
#     node 0 is the batch host, whose loss ends the relaunch loop itself: the
#     guard on the last node (elastic_guard, scripts/elastic.sh) submits the
#     rest as a new job on the nodes left and cancels the first, and the
#     check follows that job to its end.
# ELASTIC_CASES (default 012346) runs some of them (0: the layout of a relaunch, elastic_layout, no cluster).
# The model is make train's d2 at 64 channels (quick steps).
# Every wait is bounded. Needs root, namespaces and (2.) Slurm; else skipped.
# ELASTIC_CLUSTER names the simulated cluster (default llmcelast).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
export OMP_NUM_THREADS=1
tmp=$(mktemp -d -p /var/tmp llmc-elastic-test.XXXXXX)
NAME=${ELASTIC_CLUSTER:-llmcelast}
CL="scripts/cluster.sh --name $NAME"
UP=0
UP6=0
cleanup() { [ $UP = 1 ] && { $CL link $NAME-node1 up >/dev/null 2>&1; $CL down >/dev/null 2>&1; }; [ $UP6 = 1 ] && scripts/cluster.sh --name ${NAME}6 down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
if [ -z "${INVARIANT_FLAG+x}" ]; then
  INVARIANT_FLAG=""; ./train_gpt_cpu --help 2>&1 | grep -q -- --invariant && INVARIANT_FLAG="--invariant 1"
fi
state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
want() { case "${ELASTIC_CASES:-012346}" in *$1*) return 0 ;; esac; return 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
losses() { awk '$3 == "train_loss" { print $2, $4 }' "$1/main.log" 2>/dev/null; }
# same_losses A B FROM TO TOL [rel]: 0 when steps FROM..TO are in both main.logs and agree within TOL
# (absolute; relative with rel); prints the largest difference
same_losses() {
  /usr/bin/python3 - "$1" "$2" "$3" "$4" "$5" "${6:-abs}" <<'PY'
import sys
def log(d):
    r = {}
    for line in open(d + "/main.log"):
        f = line.split()
        if len(f) > 3 and f[2] == "train_loss": r[int(f[1])] = float(f[3])
    return r
a, b, lo, hi, tol = log(sys.argv[1]), log(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
ks = range(lo, hi + 1)
if any(k not in a or k not in b for k in ks): print("missing steps"); sys.exit(1)
d = max(abs(a[k] - b[k]) for k in ks)
rel = max(abs(a[k] - b[k]) / abs(b[k]) for k in ks)
print("%.1e (relative %.1e)" % (d, rel)); sys.exit(0 if (rel if sys.argv[6] == "rel" else d) <= tol else 1)
PY
}

# --- 0. the relaunch's layout (scripts/elastic.sh elastic_layout; no cluster): n nodes to n-1
# keep -d by a smaller -b or more micro-steps (issue 49 item 2: the relaunch kept -b and exited
# 1 on the total-batch rule for any n >= 3); with --invariant 1 powers of two, the largest that
# fits; refused only when nothing holds -d. "NODES PER B T D INV -> m p b a" (m nodes x p ranks,
# -b b, a micro-steps; b*T*m*p*a = D)
if want 0; then
  lay_out=$(bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 2 2 2 64 768 0 2>&1; bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 3 2 2 64 1024 0 2>&1;
            bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 2 2 1 64 384 0 2>&1; bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 3 2 2 64 1024 1 2>&1;
            bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 3 1 2 64 512 1 2>&1; bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 1 2 2 64 256 0 2>&1;
            echo "[$(bash -c '. scripts/elastic.sh; elastic_layout "$@"' _ 2 1 2 64 384 1 2>&1)]")
  want_out=$(printf '%s\n' "2 2 1 3" "2 2 2 2" "1 2 1 3" "2 2 2 2" "2 1 2 2" "1 2 2 1" "[]")
  if [ "$lay_out" = "$want_out" ]; then
    ok "elastic_layout: 3x2 ranks (-b 2, -d 768) to 2 nodes: -b 1, 3 micro-steps; 4x2 (-d 1024) to 3 nodes: 2x2, -b 2, 2 micro-steps (6 ranks cannot hold -d); 3x2 -b 1 to 2 nodes: 1x2, 3 micro-steps; --invariant 1 4x2 to 3 nodes: 4 ranks, 4x1 to 3 nodes: 2 ranks, -b 2, 2 micro-steps; 3x1 -d 384 --invariant 1 on 2 nodes: no layout (refused)"
  else bad "elastic_layout: got '$(echo $lay_out)', want '$(echo $want_out)'"; fi
  # the loop itself: a failed step with one node lost (stubbed launcher and probe) relaunches in that layout, one line says which
  mkdir -p "$tmp/el"
  lo=$(bash -c '
    . scripts/elastic.sh
    EL_NODES=(n0 n1 n2); EL_PER_NODE=2; EL_MIN_NODES=1; EL_OUT='"$tmp"'/el; EL_LOG='"$tmp"'/el.log; EL_BASE=(./train_gpt_cpu -z 3 -b 2 -t 64 -d 768)
    el_launch() { echo "launch ${EL_NODES[*]} per ${EL_PER_NODE}: $*" >> '"$tmp"'/el.launches; [ ${#EL_NODES[@]} = 3 ] && return 1; return 0; }
    el_probe() { [ "$1" != n1 ]; }
    elastic_loop -e d2 -o '"$tmp"'/el' 2>&1)
  if grep -q "^elastic: lost n1 at step 0; continuing on 2 nodes (4 ranks) from checkpoint none (a fresh start); layout -b 1, 3 micro-steps, -d 768 kept (probed in " <<< "$lo" \
     && grep -q "^launch n0 n2 per 2: -e d2 -o $tmp/el -b 1 -y 1 --lock-takeover n1$" "$tmp/el.launches"; then
    ok "elastic_loop: 3 nodes x 2 ranks, n1 lost: '$(grep '^elastic: lost' <<< "$lo" | cut -c1-140)...'; relaunched on n0 n2 with -b 1 --lock-takeover n1"
  else bad "elastic_loop with a lost middle node: '$lo' / $(cat "$tmp/el.launches" 2>/dev/null)"; fi
  # issue 49 item 4: every relaunch takes over the -o lock of the nodes lost so far (a shared file system keeps
  # a dead node's lock), after the caller's own --lock-takeover hosts: 4 nodes, n0 (rank 0's) lost, then n3
  rm -f "$tmp/el.launches"
  lo=$(bash -c '
    . scripts/elastic.sh
    EL_NODES=(n0 n1 n2 n3); EL_PER_NODE=1; EL_MIN_NODES=1; EL_OUT='"$tmp"'/el; EL_LOG='"$tmp"'/el.log; EL_BASE=(./train_gpt_cpu -z 3 -b 2 -t 64 -d 768)
    el_launch() { echo "launch ${EL_NODES[*]}: $*" >> '"$tmp"'/el.launches; [ ${#EL_NODES[@]} -ge 3 ] && return 1; return 0; }
    el_probe() { case " ${EL_NODES[*]} " in *" n0 "*) [ "$1" != n0 ] ;; *) [ "$1" != n3 ] ;; esac; }
    elastic_loop -e d2 -o '"$tmp"'/el --lock-takeover old7' 2>&1)
  want_l=$(printf '%s
' "launch n0 n1 n2 n3: -e d2 -o $tmp/el --lock-takeover old7" \
    "launch n1 n2 n3: -e d2 -o $tmp/el --lock-takeover old7 -b 2 -y 1 --lock-takeover old7,n0" \
    "launch n1 n2: -e d2 -o $tmp/el --lock-takeover old7 -b 2 -b 2 -y 1 --lock-takeover old7,n0,n3")
  if [ "$(cat "$tmp/el.launches" 2>/dev/null)" = "$want_l" ] && grep -q "^elastic: completed on 2 nodes (2 ranks) after 2 relaunches$" <<< "$lo"; then
    ok "elastic_loop: n0 (rank 0's node) lost, then n3: the relaunches pass --lock-takeover old7,n0 and then old7,n0,n3 (the caller's host first)"
  else bad "elastic_loop --lock-takeover: got '$(cat "$tmp/el.launches" 2>/dev/null)' want '$want_l' / $(grep '^elastic' <<< "$lo")"; fi
fi

# --- 1. the data order across rank counts and shard boundaries
if want 1; then
mkdir -p "$tmp/sh"
/usr/bin/python3 -c "
import numpy as np
v = np.fromfile('data/brown/brown_train_000000.bin', dtype='<u2', offset=1024)
for s in range(6):
    t = v[s * 1400:(s + 1) * 1400]
    h = np.zeros(256, '<i4'); h[0] = 20240520; h[1] = 1; h[2] = len(t)
    open('$tmp/sh/tr_%06d.bin' % s, 'wb').write(h.tobytes() + t.tobytes())"
SMALL=(-e d2 --channels 64 --heads 2 --max-seq-len 64)   # make train's d2 at 64 channels: quick steps
D1=("${SMALL[@]}" -z 1 -t 64 -d 512 -i "$tmp/sh/tr_*.bin" -v 0 -s 0 -x 8 --collective-timeout 0)
for sh in 1 0; do
  ref=$tmp/order$sh
  timeout 300 $MPIRUN -np 4 ./train_gpt_cpu "${D1[@]}" --shuffle $sh -b 2 -n 4 -o "$ref" > "$ref.txt" 2>&1 || { bad "shard order: the 4-rank run (--shuffle $sh) exit $?"; continue; }
  for np in 2 1; do
    [ $sh = 0 ] && [ $np = 1 ] && continue   # in file order, 2 ranks suffice
    d=$tmp/order${sh}_$np; mkdir -p "$d"; cp "$ref/model_00000004.bin" "$ref/state_00000004.bin" "$d/"
    timeout 300 $MPIRUN -np $np ./train_gpt_cpu "${D1[@]}" --shuffle $sh -b 2 -o "$d" -y 1 > "$d.txt" 2>&1 || { bad "shard order: the resume on $np ranks exit $?"; continue; }
    where=$(sed -n 's/^resumed from step 4: .*, data at \(epoch [0-9]* shard [0-9]* token [0-9]*\).*/\1/p' "$d.txt")
    if diff=$(same_losses "$d" "$ref" 5 8 1e-6); then
      ok "--shuffle $sh: 4 ranks' checkpoint 4 resumed on $np rank(s) (-b 2, $((4 / np)) micro-steps; $where; 2 steps per shard): steps 5-8 print the 4-rank losses (largest difference $diff)"
    else bad "--shuffle $sh: resumed on $np ranks, steps 5-8 differ from the 4-rank run by $diff"; paste <(losses "$d") <(losses "$ref" | tail -4); fi
  done
done
fi

# --- 2. and 3. need the simulated cluster
if [ "$(id -u)" != 0 ] || ! unshare --net --uts --mount true 2>/dev/null; then
  skip "elastic: the Slurm and hostfile cases skipped (need root and network namespaces)"; summary; exit
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  skip "elastic: the Slurm case skipped (needs slurmctld, slurmd, slurm-client, munge: make deps)"; SLURM=0
else SLURM=1; fi
if out=$(timeout 90 $CL up 2 $([ $SLURM = 1 ] && echo --slurm) 2>&1); then UP=1; else bad "up 2: $out"; summary; exit 1; fi
eval "$($CL env)"
TO=30   # --collective-timeout: above any stall of this shared 2-core machine (10 s was not, under load 20)
# the probe of each node after a failed launch (scripts/elastic.sh): a lost node's probe lasts its
# whole timeout on a hostfile, 30 s by default (30.1 s in make test on a 2-core Zen 5); 15 s here:
# every probe of a 2-node Slurm case, the live node's with it, ended within 4.8 s in that run
export ELASTIC_PROBE_S=${ELASTIC_PROBE_S:-15}
A=("${SMALL[@]}" -i "data/brown/brown_train_*.bin" -v 0 -s 0 -n 5 --collective-timeout $TO $INVARIANT_FLAG)
wait_line() { # file regex seconds
  local i
  for ((i = 0; i < $3 * 5; i++)); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}
# the time from the cut to the first step line after the relaunch ("resumed from")
next_step_after_cut() { # file t_cut seconds: prints the seconds, or fails
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    sed -n '/^resumed from/,$p' "$1" 2>/dev/null | grep -qE "^step +[0-9]+/" && { since "$2"; return 0; }
    sleep 0.2
  done
  return 1
}
# compare FINAL_DIR STEPS LABEL: with --invariant, cmp with the uninterrupted 4- and 2-rank runs; else the losses
compare_final() {
  local d=$1 steps=$2 label=$3 ck; ck=$(printf %08d "$steps")
  if [ -n "$INVARIANT_FLAG" ]; then
    if cmp -s "$d/model_$ck.bin" "$tmp/ref4_$steps/model_$ck.bin" && cmp -s "$d/state_$ck.bin" "$tmp/ref4_$steps/state_$ck.bin" \
       && cmp -s "$d/model_$ck.bin" "$tmp/ref2_$steps/model_$ck.bin" && cmp -s "$d/state_$ck.bin" "$tmp/ref2_$steps/state_$ck.bin"; then
      ok "$label: with $INVARIANT_FLAG, checkpoint $steps (model and state) is cmp-equal to the uninterrupted 4-rank and 2-rank runs'"
    else bad "$label: with $INVARIANT_FLAG, checkpoint $steps differs from an uninterrupted run's ($(cmp "$d/model_$ck.bin" "$tmp/ref4_$steps/model_$ck.bin" 2>&1 | head -1))"; fi
  else
    local diff
    if diff=$(same_losses "$d" "$tmp/ref4_$steps" 1 "$steps" 1e-5 rel); then
      ok "$label: the trainer has no --invariant: losses of steps 1-$steps equal the uninterrupted 4-rank run's within 1e-5 relative (largest difference $diff); checkpoint $steps is not compared with cmp"
    else bad "$label: losses differ from the uninterrupted 4-rank run by $diff (bound 1e-5 relative)"; fi
  fi
}
refs() { # steps: the uninterrupted 4- and 2-rank runs
  local np
  for np in 4 2; do
    [ -f "$tmp/ref${np}_$1/model_$(printf %08d "$1").bin" ] && continue
    timeout 400 $MPIRUN -np $np ./train_gpt_cpu "${A[@]}" -z 3 -b 2 -t 64 -d 512 -x "$1" -o "$tmp/ref${np}_$1" > "$tmp/ref${np}_$1.txt" 2>&1 \
      || bad "the uninterrupted $np-rank run of $1 steps: exit $?"
  done
}

# --- 2. Slurm: sbatch --no-kill ... ELASTIC=1, node 1's link cut at step 12 of 30
if want 2 && [ $SLURM = 1 ]; then
  refs 30
  jid=$(timeout 20 sbatch --parsable --no-kill --chdir="$(pwd)" --output="$tmp/%j.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
    --cpus-per-task=1 --export="ALL,CPU=1,PRECISION=fp32,ZERO=3,B=2,T=64,TOTAL=512,STEPS=30,ELASTIC=1" scripts/run_slurm.sbatch "${A[@]}" -o "$tmp/slurm")
  out=$tmp/$jid.out
  if ! wait_line "$out" "^step +12/" 240; then bad "slurm: job $jid never reached step 12 (state $(state "$jid"))"; tail -5 "$out"
  else
    t0=$(now); $CL link $NAME-node1 down > /dev/null
    nxt=$(next_step_after_cut "$out" "$t0" 400)
    if wait_line "$out" "^elastic: (completed|the step|lost .*fewer)" 400; then
      ev=$(grep "^elastic: lost" "$out")
      if [ "$(grep -c "^elastic: lost" "$out")" = 1 ] && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint 1[05]; layout -b 2, 2 micro-steps, -d 512 kept" \
         && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" \
         && [ -f "$tmp/slurm/model_00000030.bin" ] && [ -f "$tmp/slurm/state_00000030.bin" ]; then
        ok "slurm: node 1's link cut after step 12: '$ev'; the step on node 0 resumed ($(grep -m1 '^resumed from' "$out" | cut -d, -f1)), completed with checkpoint 30; from the cut to the next step: ${nxt:-?} s"
      else bad "slurm: job $jid: $(grep -E '^elastic' "$out")"; grep -E "^error|^srun: error" "$out" | head -5; fi
      compare_final "$tmp/slurm" 30 "slurm"
    else bad "slurm: job $jid did not finish within 400 s of the cut ($(state "$jid")): $(grep -E '^elastic' "$out")"; tail -5 "$out"; fi
  fi
  $CL link $NAME-node1 up > /dev/null
  for i in $(seq 1 150); do case "$(state "$jid")" in RUNNING|COMPLETING|PENDING) sleep 0.2 ;; *) break ;; esac; done
  scancel "$jid" 2>/dev/null
fi

# --- 4. HSDP: the survivors write the checkpoint of their last step (Slurm: srun leaves them alive until they exit)
# (the rescue checkpoint S is 12..19: the cut lands a few short steps after step 12 is seen, and
# under load the job's output reaches its file late: make test beside a busy loop on every core saw
# S = 19 (2026-12-07), the survivors' relaunch then runs step 20 alone; the
# uninterrupted reference runs on this host over shared memory only, never the cluster's links)
if want 4 && [ $SLURM = 1 ]; then
  H=("${SMALL[@]}" -i "data/brown/brown_train_*.bin" -v 0 -s 0 --shard-group 2 --collective-timeout $TO)
  # case 2's cut leaves node 1 drained ("Kill task failed"): back in service first
  scontrol update NodeName=$NAME-node1 State=RESUME > /dev/null 2>&1
  for i in $(seq 1 150); do [ "$(sinfo -h -n $NAME-node1 -o %T 2>/dev/null)" = idle ] && break; sleep 0.2; done
  jid=$(timeout 20 sbatch --parsable --no-kill --chdir="$(pwd)" --output="$tmp/%j.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
    --cpus-per-task=1 --export="ALL,CPU=1,PRECISION=fp32,ZERO=3,B=2,T=64,TOTAL=512,STEPS=20,ELASTIC=1" scripts/run_slurm.sbatch "${H[@]}" -n 10 -o "$tmp/hsdp")
  out=$tmp/$jid.out
  if ! wait_line "$out" "^step +12/" 240; then bad "hsdp: job $jid never reached step 12"; tail -5 "$out"
  else
    t0=$(now); $CL link $NAME-node1 down > /dev/null
    nxt=$(next_step_after_cut "$out" "$t0" 400)
    if wait_line "$out" "^elastic: (completed|the step|lost .*fewer)" 400; then
      S=$(sed -n 's/^rescue: wrote checkpoint \([0-9][0-9]*\) .*/\1/p' "$out" | head -1)
      ev=$(grep "^elastic: lost" "$out")
      if [ -n "$S" ] && [ "$S" -ge 12 ] && [ "$S" -le 19 ] && [ "$(grep -c "^elastic: lost" "$out")" = 1 ] \
         && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint $S; layout -b 2, 2 micro-steps, -d 512 kept( \(--invariant 1: powers of two\))? \(written by the survivors; " \
         && grep -q "^resumed from step $S: " "$out" && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" \
         && [ -f "$tmp/hsdp/state_00000020.bin" ]; then
        ok "hsdp: node 1's link cut after step 12: node 0's shard group wrote checkpoint $S ($(grep -m1 '^rescue: wrote' "$out" | sed 's/.* in \([0-9.]* s\), \([0-9.]* s\) after.*/in \1, \2 after its collective began/')); '$ev'; completed with checkpoint 20; from the cut to the next step: ${nxt:-?} s"
      else bad "hsdp: job $jid: rescue '${S:-none}': $(grep -E '^(elastic|rescue)' "$out")"; grep -E "^error|^srun: error" "$out" | head -5; fi
      if [ -n "$S" ]; then   # the uninterrupted 4-rank run's checkpoint S, and it resumed on 2 ranks to 20 (on the cluster: the link back first)
        $CL link $NAME-node1 up > /dev/null
        scancel "$jid" 2>/dev/null   # the job's last processes (node 1's ranks of the cut step) end before the references run
        for i in $(seq 1 300); do case "$(state "$jid")" in RUNNING|COMPLETING|PENDING) sleep 0.2 ;; *) break ;; esac; done
        ck=$(printf %08d "$S")
        timeout 300 $MPIRUN -np 4 ./train_gpt_cpu "${H[@]}" -z 3 -b 2 -t 64 -d 512 -x 20 -n "$S" -o "$tmp/href4" > "$tmp/href4.txt" 2>&1; rr=$?
      fi
      if [ -n "$S" ] && [ $rr != 0 ]; then
        # KNOWN DEFECT of this check (open): the reference run, started here after the Slurm
        # job, failed at start-up in MPI (exit 124 or 17: MPI_Comm_split_type internal error)
        # in two runs of 12-06; counted as skipped, never as passed
        skip "hsdp: the uninterrupted 4-rank reference run failed at start-up (exit $rr: $(grep -m1 -E "MPI_ERR|error" "$tmp/href4.txt" | cut -c1-120)): the cmp of the survivors' checkpoints with it is not made"
      elif [ -n "$S" ]; then
        mkdir -p "$tmp/href2"; cp "$tmp/href4/model_$ck.bin" "$tmp/href4/state_$ck.bin" "$tmp/href2/" 2>/dev/null
        timeout 300 $MPIRUN -np 2 ./train_gpt_cpu "${H[@]}" -z 3 -b 2 -t 64 -d 512 -x 20 -n 10 -y 1 -o "$tmp/href2" > "$tmp/href2.txt" 2>&1 || bad "hsdp: the 2-rank resume of its checkpoint $S: exit $?"
        if cmp -s "$tmp/hsdp/model_$ck.bin" "$tmp/href4/model_$ck.bin" && cmp -s "$tmp/hsdp/state_$ck.bin" "$tmp/href4/state_$ck.bin"; then
          ok "hsdp: the survivors' checkpoint $S (model and state) is cmp-equal to the uninterrupted 4-rank run's checkpoint $S"
        else bad "hsdp: the survivors' checkpoint $S differs from the uninterrupted run's ($(cmp "$tmp/hsdp/state_$ck.bin" "$tmp/href4/state_$ck.bin" 2>&1 | head -1))"; fi
        if cmp -s "$tmp/hsdp/model_00000020.bin" "$tmp/href2/model_00000020.bin" && cmp -s "$tmp/hsdp/state_00000020.bin" "$tmp/href2/state_00000020.bin"; then
          ok "hsdp: checkpoint 20 (model and state) is cmp-equal to the uninterrupted 4-rank run's checkpoint $S resumed on 2 ranks"
        else bad "hsdp: checkpoint 20 differs from the uninterrupted run's checkpoint $S resumed on 2 ranks"; fi
      fi
    else bad "hsdp: job $jid did not finish within 400 s of the cut: $(grep -E '^(elastic|rescue)' "$out")"; tail -5 "$out"; fi
  fi
  $CL link $NAME-node1 up > /dev/null
  for i in $(seq 1 150); do case "$(state "$jid")" in RUNNING|COMPLETING|PENDING) sleep 0.2 ;; *) break ;; esac; done
  scancel "$jid" 2>/dev/null
fi

# --- 3. a hostfile: run_multinode.sh ELASTIC=1, node 1's link cut at step 12 of 30
if want 3; then
refs 30
out=$tmp/hostfile.out
HOSTFILE=$($CL hostfile) CPU=1 NODES=2 PER_NODE=2 ZERO=3 B=2 T=64 TOTAL=512 STEPS=30 ELASTIC=1 \
  timeout 500 bash scripts/run_multinode.sh "${A[@]}" -o "$tmp/hf" > "$out" 2>&1 &
job=$!
if ! wait_line "$out" "^step +12/" 240; then bad "hostfile: the run never reached step 12"; tail -5 "$out"
else
  t0=$(now); $CL link $NAME-node1 down > /dev/null
  nxt=$(next_step_after_cut "$out" "$t0" 400)
  wait "$job"; rc=$?
  ev=$(grep "^elastic: lost" "$out")
  if [ $rc = 0 ] && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint 1[05]; layout -b 2, 2 micro-steps, -d 512 kept" \
     && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" && [ -f "$tmp/hf/state_00000030.bin" ]; then
    ok "hostfile: node 1's link cut after step 12: '$ev'; completed with checkpoint 30 (exit 0); from the cut to the next step: ${nxt:-?} s"
  else bad "hostfile: exit $rc: $(grep -E '^elastic' "$out")"; grep -E "^error" "$out" | head -3; fi
  compare_final "$tmp/hf" 30 "hostfile"
fi
$CL link $NAME-node1 up > /dev/null
fi
# --- 5. (not in the default ELASTIC_CASES: about 3 min) HSDP on a hostfile at the default collective
# timeout: run_multinode.sh ELASTIC=1 raises mpirun's kill delay to (60 + 20) / 2 s, so the survivors
# time out at 60 s and write their checkpoint before mpirun's SIGKILL (with the kill delay of 10 s
# they were killed first and the relaunch went on from the periodic checkpoint)
if want 5; then
  H5=("${SMALL[@]}" -i "data/brown/brown_train_*.bin" -v 0 -s 0 --shard-group 2)
  out=$tmp/hf5.out
  kd=$(HOSTFILE=$($CL hostfile) CPU=1 NODES=2 PER_NODE=2 ELASTIC=1 DRYRUN=1 bash scripts/run_multinode.sh "${H5[@]}" -o x | grep -o 'odls_base_sigkill_timeout [0-9]*' | cut -d' ' -f2)
  HOSTFILE=$($CL hostfile) CPU=1 NODES=2 PER_NODE=2 ZERO=3 B=2 T=64 TOTAL=512 STEPS=20 ELASTIC=1 \
    timeout 500 bash scripts/run_multinode.sh "${H5[@]}" -n 10 -o "$tmp/hf5" > "$out" 2>&1 &
  job=$!
  if ! wait_line "$out" "^step +12/" 240; then bad "hostfile hsdp: the run never reached step 12"; tail -5 "$out"
  else
    t0=$(now); $CL link $NAME-node1 down > /dev/null
    nxt=$(next_step_after_cut "$out" "$t0" 400)
    wait "$job"; rc=$?
    S=$(sed -n 's/^rescue: wrote checkpoint \([0-9][0-9]*\) .*/\1/p' "$out" | head -1)
    ev=$(grep "^elastic: lost" "$out")
    if [ $rc = 0 ] && [ -n "$S" ] && [ "$S" -ge 12 ] && [ "$S" -le 19 ] \
       && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint $S; layout -b 2, 2 micro-steps, -d 512 kept( \(--invariant 1: powers of two\))? \(written by the survivors; " \
       && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" && [ -f "$tmp/hf5/state_00000020.bin" ]; then
      ok "hostfile hsdp: default --collective-timeout 60, kill delay ${kd:-?} s: the survivors wrote checkpoint $S ($(grep -m1 '^rescue: wrote' "$out" | sed 's/.* in \([0-9.]* s\), \([0-9.]* s\) after.*/in \1, \2 after its collective began/')); '$ev'; completed with checkpoint 20; from the cut to the next step: ${nxt:-?} s"
    else bad "hostfile hsdp: exit $rc, rescue '${S:-none}': $(grep -E '^(elastic|rescue)' "$out")"; grep -E "^error|SIGTERM|SIGKILL|Killed" "$out" | head -5; fi
  fi
  $CL link $NAME-node1 up > /dev/null
fi
$CL down > /dev/null 2>&1; UP=0

# --- 6. (issue 49 item 2) 3 or 4 nodes on a hostfile, one lost (node 0, a middle one, the last): ELASTIC_LOSE="K:I ..."
if want 6; then
  CL6="scripts/cluster.sh --name ${NAME}6"
  for spec in ${ELASTIC_LOSE:-4:0}; do
    K=${spec%%:*}; I=${spec#*:}; lostn=${NAME}6-node$I; t6=$(date +%s)
    via=${ELASTIC_VIA:-hostfile}
    if [ $via = slurm ] && [ $SLURM = 0 ]; then skip "$spec under Slurm: no Slurm here"; continue; fi
    # under Slurm node 0 is the batch host: the guard on the last node (elastic_guard) sees it
    # leave the job once slurmctld marks it DOWN (SlurmdTimeout, 10 s here, 300 by default)
    if ! o6=$(LLMC_SLURMD_TIMEOUT=10 timeout 120 $CL6 up "$K" $([ $via = slurm ] && echo --slurm) 2>&1); then bad "$spec: up $K: $o6"; continue; fi
    UP6=1; eval "$($CL6 env)"
    if [ "$K" = 4 ]; then
      refs 30; args6=("${A[@]}"); tot=512; want6="continuing on 2 nodes \(2 ranks\) from checkpoint 1[05]; layout -b 2, 2 micro-steps, -d 512 kept"
    else
      args6=("${SMALL[@]}" -i "data/brown/brown_train_*.bin" -v 0 -s 0 -n 5 --collective-timeout $TO); tot=384
      want6="continuing on 2 nodes \(2 ranks\) from checkpoint 1[05]; layout -b 1, 3 micro-steps, -d 384 kept"
      [ -f "$tmp/ref3/model_00000030.bin" ] || timeout 400 $MPIRUN -np 3 ./train_gpt_cpu "${args6[@]}" -z 3 -b 2 -t 64 -d 384 -x 30 -o "$tmp/ref3" > "$tmp/ref3.txt" 2>&1 \
        || bad "the uninterrupted 3-rank run: exit $?"
    fi
    out=$tmp/lose$K$I.out
    if [ $via = slurm ]; then
      jid=$(timeout 20 sbatch --parsable --no-kill --chdir="$(pwd)" --output="$out" --nodes=$K --ntasks-per-node=1 --gpus-per-node=0 --cpus-per-task=1 \
        --export="ALL,CPU=1,PRECISION=fp32,ZERO=3,B=2,T=64,TOTAL=$tot,STEPS=30,ELASTIC=1" scripts/run_slurm.sbatch "${args6[@]}" -o "$tmp/lose$K$I")
      # the job's end as a process to wait for: its exit status is 0 only when it COMPLETED
      # (node 0 lost: the job is cancelled by its guard and the run goes on as the job its line names)
      ( for ((w = 0; w < 3000; w++)); do case "$(state "$jid")" in RUNNING|COMPLETING|PENDING|CONFIGURING) sleep 0.2 ;; COMPLETED) exit 0 ;;
          CANCELLED) j2=$(sed -n 's/.*(the batch host: continued as job \([0-9]*\) .*/\1/p' "$out" | tail -1)
                     if [ -n "$j2" ] && [ "$j2" != "$jid" ]; then jid=$j2; else exit 1; fi ;;
          *) exit 1 ;; esac; done; exit 124 ) &
    else
      HOSTFILE=$($CL6 hostfile) CPU=1 NODES=$K PER_NODE=1 ZERO=3 B=2 T=64 TOTAL=$tot STEPS=30 ELASTIC=1 \
        timeout 600 bash scripts/run_multinode.sh "${args6[@]}" -o "$tmp/lose$K$I" > "$out" 2>&1 &
    fi
    job=$!
    if ! wait_line "$out" "^step +12/" 300; then bad "$spec: the run never reached step 12"; tail -5 "$out"; kill $job 2>/dev/null
    else
      t0=$(now); $CL6 node "$lostn" down > /dev/null; $CL6 link "$lostn" down > /dev/null
      nxt=$(next_step_after_cut "$out" "$t0" 500)
      wait "$job"; rc=$?
      ev=$(grep "^elastic: lost" "$out")
      if [ $rc = 0 ] && [ "$(grep -c "^elastic: lost" "$out")" = 1 ] && echo "$ev" | grep -qE "^elastic: lost $lostn at step 1[2-9]; $want6" \
         && grep -q "^elastic: completed on 2 nodes (2 ranks) after 1 relaunch$" "$out" && [ -f "$tmp/lose$K$I/state_00000030.bin" ]; then
        ok "$via, $K nodes, node $I lost after step 12: '$(cut -c1-190 <<<"$ev")...'; completed with checkpoint 30 (exit 0); from the loss to the next step ${nxt:-?} s, the case $(( $(date +%s) - t6 )) s"
      else bad "$via, $K nodes, node $I lost: exit $rc: $(grep -E '^elastic' "$out")"; grep -E "^error" "$out" | head -3; fi
      if [ "$K" = 4 ]; then compare_final "$tmp/lose$K$I" 30 "$K nodes, node $I lost"
      elif diff=$(same_losses "$tmp/lose$K$I" "$tmp/ref3" 1 30 1e-5 rel); then ok "$K nodes, node $I lost: losses of steps 1-30 equal the uninterrupted 3-rank run's within 1e-5 relative (largest difference $diff)"
      else bad "$K nodes, node $I lost: losses differ from the uninterrupted 3-rank run by $diff"; fi
    fi
    $CL6 down > /dev/null 2>&1; UP6=0
  done
fi
summary
