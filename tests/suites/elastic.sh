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
# ELASTIC_CASES (default 1234) runs some of them.
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
cleanup() { [ $UP = 1 ] && { $CL link $NAME-node1 up >/dev/null 2>&1; $CL down >/dev/null 2>&1; }; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
if [ -z "${INVARIANT_FLAG+x}" ]; then
  INVARIANT_FLAG=""; ./train_gpt_cpu --help 2>&1 | grep -q -- --invariant && INVARIANT_FLAG="--invariant 1"
fi
state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
want() { case "${ELASTIC_CASES:-1234}" in *$1*) return 0 ;; esac; return 1; }
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
      if [ "$(grep -c "^elastic: lost" "$out")" = 1 ] && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint 1[05] " \
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
      if [ -n "$S" ] && [ "$S" -ge 12 ] && [ "$S" -le 14 ] && [ "$(grep -c "^elastic: lost" "$out")" = 1 ] \
         && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint $S \(written by the survivors; " \
         && grep -q "^resumed from step $S: " "$out" && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" \
         && [ -f "$tmp/hsdp/state_00000020.bin" ]; then
        ok "hsdp: node 1's link cut after step 12: node 0's shard group wrote checkpoint $S ($(grep -m1 '^rescue: wrote' "$out" | sed 's/.* in \([0-9.]* s\), \([0-9.]* s\) after.*/in \1, \2 after its collective began/')); '$ev'; completed with checkpoint 20; from the cut to the next step: ${nxt:-?} s"
      else bad "hsdp: job $jid: rescue '${S:-none}': $(grep -E '^(elastic|rescue)' "$out")"; grep -E "^error|^srun: error" "$out" | head -5; fi
      if [ -n "$S" ]; then   # the uninterrupted 4-rank run's checkpoint S, and it resumed on 2 ranks to 20 (on the cluster: the link back first)
        $CL link $NAME-node1 up > /dev/null
        ck=$(printf %08d "$S")
        timeout 300 $MPIRUN -np 4 ./train_gpt_cpu "${H[@]}" -z 3 -b 2 -t 64 -d 512 -x 20 -n "$S" -o "$tmp/href4" > "$tmp/href4.txt" 2>&1 || bad "hsdp: the uninterrupted 4-rank run: exit $?"
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
  if [ $rc = 0 ] && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint 1[05] " \
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
    if [ $rc = 0 ] && [ -n "$S" ] && [ "$S" -ge 12 ] && [ "$S" -le 14 ] \
       && echo "$ev" | grep -qE "^elastic: lost $NAME-node1 at step 1[2-9]; continuing on 1 node \(2 ranks\) from checkpoint $S \(written by the survivors; " \
       && grep -q "^elastic: completed on 1 node (2 ranks) after 1 relaunch$" "$out" && [ -f "$tmp/hf5/state_00000020.bin" ]; then
      ok "hostfile hsdp: default --collective-timeout 60, kill delay ${kd:-?} s: the survivors wrote checkpoint $S ($(grep -m1 '^rescue: wrote' "$out" | sed 's/.* in \([0-9.]* s\), \([0-9.]* s\) after.*/in \1, \2 after its collective began/')); '$ev'; completed with checkpoint 20; from the cut to the next step: ${nxt:-?} s"
    else bad "hostfile hsdp: exit $rc, rescue '${S:-none}': $(grep -E '^(elastic|rescue)' "$out")"; grep -E "^error|SIGTERM|SIGKILL|Killed" "$out" | head -5; fi
  fi
  $CL link $NAME-node1 up > /dev/null
fi
$CL down > /dev/null 2>&1; UP=0
summary
