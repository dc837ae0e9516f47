#!/usr/bin/env bash
# The trainer under Slurm, on the simulated cluster (scripts/cluster.sh up 2
# --slurm: munged, slurmctld, one slurmd per node; Debian's slurm-wlm 22.05):
#  1. sinfo shows the 2 nodes idle;
#  2. sbatch scripts/run_slurm.sbatch (CPU mode, srun --mpi=pmix) trains 2
#     nodes x 2 tasks; its placement table shows the Slurm nodes and its
#     final checkpoint is bitwise the same run launched by cluster.sh run
#     (mpirun);
#  3. --kill-on-bad-exit: kill -9 of one rank, or scancel of the job's step,
#     ends the job within 10 s and scontrol shows it FAILED or CANCELLED
#     (no accounting database here: sacct has nothing to show);
#  2b. with memory-limited nodes (--mem 2G): each slurmd runs in its node's
#     memory cgroup, and on cgroup v1 Slurm's task/cgroup puts a job of
#     sbatch --mem=600M in a cgroup of 600 MiB inside the node's, which the
#     trainer's budget line names; --mem=100G is refused by Slurm;
#  5. scripts/cluster.sh node NODE down kills every process of the node (a
#     running job's and slurmd); up (the cluster's) starts a dead slurmd
#     again, and node NODE up brings the node back into service: a 2-node
#     job completes;
#  4. down stops every daemon and leaves no /etc/hosts line.
# Every wait is bounded. Needs root and Slurm (make deps installs it).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/lib.sh
# --- 0. the script's rules without a cluster: srun and scontrol are stubs
# (PATH), the job's variables set by hand. ELASTIC=1 with REQUEUE=1: a step
# stopped by SIGUSR1 (exit 138) is requeued as without ELASTIC (issue 49
# item 5: before, the elastic branch exited before the rule); an elastic job
# prints the program/threads line and that it needs sbatch --no-kill, and
# DRYRUN=1 ELASTIC=1 names the relaunch loop (item 19)
stub=$(mktemp -d -p /var/tmp llmc-slurm-stub.XXXXXX)
mkdir -p "$stub/bin"
cat > "$stub/bin/srun" <<'EOF2'
#!/usr/bin/env bash
# a step: exit 138 (stopped by SIGUSR1, checkpoint written); a probe (a command "true"): 0
for a in "$@"; do [ "$a" = true ] && exit 0; done
echo "step: $*"; exit 138
EOF2
cat > "$stub/bin/scontrol" <<'EOF2'
#!/usr/bin/env bash
if [ "$1 $2" = "show hostnames" ]; then echo n0; echo n1; exit 0; fi
echo "$*" >> "$STUB_LOG"
EOF2
chmod +x "$stub/bin/srun" "$stub/bin/scontrol"
for el in 0 1; do
  : > "$stub/scontrol.log"
  o=$(PATH="$stub/bin:$PATH" STUB_LOG="$stub/scontrol.log" SLURM_JOB_ID=42 SLURM_JOB_NODELIST="n[0-1]" SLURM_NTASKS=4 SLURM_SUBMIT_DIR="$(pwd)" \
      TMPDIR="$stub" CPU=1 ELASTIC=$el REQUEUE=1 timeout 60 bash scripts/run_slurm.sbatch -e d2 -o "$stub/out$el" 2>&1); rc=$?
  if [ $rc = 138 ] && grep -qx "requeue 42" "$stub/scontrol.log" && grep -q "^run_slurm.sbatch: stopped by SIGUSR1 (exit 138): scontrol requeue 42$" <<< "$o"; then
    ok "REQUEUE=1$([ $el = 1 ] && echo " with ELASTIC=1"): a step that exits 138 (SIGUSR1) is requeued (scontrol requeue 42; stubbed srun and scontrol)"
  else bad "REQUEUE=1 ELASTIC=$el: exit $rc, scontrol calls '$(tr '\n' ';' < "$stub/scontrol.log")'"; echo "$o" | tail -5; fi
  if [ $el = 1 ]; then
    if grep -q "^run_slurm.sbatch: ./train_gpt_cpu_bf16 (PRECISION=bf16), OMP_NUM_THREADS=1 per task: the numbers depend on both$" <<< "$o" \
       && grep -q "^elastic: ELASTIC=1 needs the job submitted with sbatch --no-kill" <<< "$o"; then
      ok "ELASTIC=1: the job prints the program/threads line and that it needs sbatch --no-kill"
    else bad "ELASTIC=1: no program/threads line or no --no-kill warning:"; echo "$o" | head -5; fi
  fi
done
o=$(PATH="$stub/bin:$PATH" SLURM_JOB_NODELIST="n[0-1]" SLURM_NTASKS=4 CPU=1 ELASTIC=1 DRYRUN=1 bash scripts/run_slurm.sbatch -e d2 -o /x 2>&1)
if grep -q "^# ELASTIC=1: this command runs inside scripts/elastic.sh's relaunch loop" <<< "$o" && grep -q "^OMP_NUM_THREADS=1 srun --mpi=pmix .*--overlap .* -d 4096 " <<< "$o"; then
  ok "DRYRUN=1 ELASTIC=1 names the relaunch loop and its -d (B*T*ranks of the first launch): $(tail -1 <<< "$o" | cut -c1-60)..."
else bad "DRYRUN=1 ELASTIC=1: '$o'"; fi
rm -rf "$stub"
cannot_run() {
  if [ "${CI:-}" = true ]; then bad "slurm: $1"; else skip "slurm: skipped ($1)"; fi
  summary; exit
}
[ "$(id -u)" = 0 ] || cannot_run "needs root: network namespaces"
unshare --net --uts --mount true 2>/dev/null || cannot_run "needs network, UTS and mount namespaces"
command -v slurmctld >/dev/null && command -v munged >/dev/null || cannot_run "needs slurmctld, slurmd, slurm-client, munge (make deps)"
make -s train_gpt_cpu >/dev/null 2>&1 || { bad "make train_gpt_cpu"; summary; exit 1; }
NAME=llmcslurm
CL="scripts/cluster.sh --name $NAME"
export OMP_NUM_THREADS=1
# (the outputs may live anywhere the nodes see; /var/tmp is as good as any)
tmp=$(mktemp -d -p /var/tmp llmc-slurm-test.XXXXXX)
cleanup() { $CL down >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM
# memory-limited nodes: Slurm confines each job in its node's cgroup (task/cgroup on cgroup v1)
MEMARG=""
if [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ]; then MEMARG="--mem 2G"; fi
if out=$(timeout 60 $CL up 2 --slurm $MEMARG 2>&1); then ok "up 2 --slurm $MEMARG: $out"; else bad "up 2 --slurm $MEMARG: $out"; summary; exit 1; fi
eval "$($CL env)"
n=$(timeout 20 sinfo -h -N -t idle -o %N | sort -u | tr '\n' ' ')
[ "$n" = "$NAME-node0 $NAME-node1 " ] && ok "sinfo: 2 idle nodes ($n)" || bad "sinfo: idle nodes '$n'"

A=(-e d2 -i "data/brown/brown_train_*.bin" -v 0 -s 0)
sb() { # extra env, args...: submit, print the job id
  local envs=$1; shift
  timeout 20 sbatch --parsable --chdir="$(pwd)" --output="$tmp/%j.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
    --cpus-per-task=1 --export="ALL,CPU=1,PRECISION=fp32,$envs" scripts/run_slurm.sbatch "${A[@]}" "$@"
}
state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_state() { # job seconds: waits while PENDING/RUNNING/COMPLETING; prints the state
  local i s
  for ((i = 0; i < $2 * 5; i++)); do
    s=$(state "$1"); case "$s" in PENDING|RUNNING|COMPLETING|CONFIGURING|"") sleep 0.2 ;; *) echo "$s"; return 0 ;; esac
  done
  echo "${s:-unknown} (still after $2 s)"; return 1
}

# --- 2. sbatch == cluster.sh run
jid=$(sb "ZERO=3,B=2,T=64,STEPS=4" -o "$tmp/slurm")
st=$(wait_state "$jid" 120)
timeout 120 $CL run -np 4 --map-by ppr:2:node -- ./train_gpt_cpu "${A[@]}" -z 3 -b 2 -t 64 -x 4 -o "$tmp/mpirun" > "$tmp/mpirun.out" 2>&1 || bad "cluster.sh run: exit $?"
if [ "$st" = COMPLETED ] && [ -s "$tmp/slurm/model_00000004.bin" ] && cmp -s "$tmp/slurm/model_00000004.bin" "$tmp/mpirun/model_00000004.bin" \
   && cmp -s "$tmp/slurm/state_00000004.bin" "$tmp/mpirun/state_00000004.bin"; then
  ok "sbatch run_slurm.sbatch (srun --mpi=pmix, 2 nodes x 2 tasks): COMPLETED, checkpoint and state bitwise those of cluster.sh run"
else bad "sbatch: job $jid $st; the checkpoints differ or are missing"; tail -5 "$tmp/$jid.out"; fi
if grep -qE "^ +2 +$NAME-node1 +0 +2 " "$tmp/$jid.out" && grep -qE "^ +0 +$NAME-node0 +0 +2 " "$tmp/$jid.out"; then
  ok "the job's placement table shows the Slurm nodes (ranks 0-1 on $NAME-node0, 2-3 on $NAME-node1)"
else bad "placement under Slurm:"; grep -A5 "^placement" "$tmp/$jid.out"; fi

# --- 2b. the job's memory: slurmd lives in its node's cgroup, and Slurm's own
# cgroup (task/cgroup) gives the job --mem; the trainer's budget names it
if [ -z "$MEMARG" ]; then skip "the jobs' memory cgroups: skipped (no memory cgroup hierarchy here)"
else
  cg0=$(sed -n 's/^cg0=//p' /run/llmc-cluster/$NAME/state)
  dpid=$(cat /run/llmc-cluster/$NAME/slurm/slurmd.$NAME-node0.pid 2>/dev/null)
  rel=${cg0#/sys/fs/cgroup/memory}; rel=${rel#/sys/fs/cgroup}   # the path as /proc/PID/cgroup shows it (v1, v2)
  grep -q ":$rel\$" "/proc/$dpid/cgroup" 2>/dev/null && ok "slurmd of $NAME-node0 runs in the node's memory cgroup" \
    || bad "slurmd of $NAME-node0 (pid '$dpid') is not in $cg0: $(grep memory "/proc/$dpid/cgroup" 2>/dev/null)"
  if [ "$(sed -n 's/^slurmcg=//p' /run/llmc-cluster/$NAME/state)" != 1 ]; then
    skip "sbatch --mem: skipped (the nodes are cgroup v2: Slurm 22.05's cgroup/v2 needs systemd for its step scopes; the jobs have the node's limit only)"
  else
    jid=$(timeout 20 sbatch --parsable --mem=600M --chdir="$(pwd)" --output="$tmp/%j.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
      --cpus-per-task=1 --export="ALL,CPU=1,ZERO=1,B=2,T=64,STEPS=1" scripts/run_slurm.sbatch "${A[@]}")
    st=$(wait_state "$jid" 120)
    if [ "$st" = COMPLETED ] && grep -q "^memory: .*budget [0-9.]* GB (rank [0-9]* on node $NAME-node[01], the smallest over the 4 ranks: cgroup v1 .*/$NAME-node[01]/slurm_$NAME-node[01]/uid_[0-9]*/job_$jid/\(step_0/\)*memory.limit_in_bytes: 0.6291 GB, less [0-9.e-]* GB held by other processes of the cgroup, / 2 ranks of the node)" "$tmp/$jid.out"; then
      ok "sbatch --mem=600M: the job's own cgroup inside the node's (600 MiB = 0.6291 GB), read by the fit check: $(grep -o 'budget [0-9.]* GB' "$tmp/$jid.out")"
    else bad "sbatch --mem=600M: job $jid $st: $(grep -o 'budget.*' "$tmp/$jid.out" | head -1)"; fi
    jid=$(timeout 20 sbatch --parsable --mem=100G --chdir="$(pwd)" --output="$tmp/%j.out" --nodes=2 --ntasks-per-node=2 --gpus-per-node=0 \
      --cpus-per-task=1 --export="ALL,CPU=1,ZERO=1,B=2,T=64,STEPS=1" scripts/run_slurm.sbatch "${A[@]}" 2>&1)
    case "$jid" in *"Memory specification can not be satisfied"*|*"Requested node configuration is not available"*) ok "sbatch --mem=100G on 2 GB nodes: Slurm refuses it ($jid)";;
      *) bad "sbatch --mem=100G on 2 GB nodes: '$jid'"; scancel "$jid" 2>/dev/null;; esac
  fi
fi

# --- 3. --kill-on-bad-exit: a rank killed, a step cancelled
for how in kill scancel; do
  jid=$(sb "ZERO=1,B=2,T=64,STEPS=1000")
  for i in $(seq 1 300); do grep -qE "^step +5/" "$tmp/$jid.out" 2>/dev/null && break; sleep 0.2; done
  if ! grep -qE "^step +5/" "$tmp/$jid.out" 2>/dev/null; then   # a fault needs a running job first
    bad "$how: job $jid never reached step 5 (state $(state "$jid"))"; tail -5 "$tmp/$jid.out" 2>/dev/null; scancel "$jid" 2>/dev/null; continue
  fi
  t0=$(date +%s.%N)
  if [ $how = kill ]; then
    pid=$(for p in $(ip netns pids $NAME-node1); do [ "$(cat /proc/$p/comm 2>/dev/null)" = train_gpt_cpu ] && echo "$p"; done | head -1)
    [ -n "$pid" ] || { bad "kill: no train_gpt_cpu process in $NAME-node1's namespace"; scancel "$jid" 2>/dev/null; continue; }
    kill -9 "$pid"
    what="kill -9 of rank pid $pid on $NAME-node1"
  else
    scancel "$jid.0"; what="scancel $jid.0 (the srun step)"
  fi
  st=$(wait_state "$jid" 10); dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case "$st" in FAILED|CANCELLED) ok "$what: the job ended in $dt s, scontrol: JobState=$st, $(scontrol show job "$jid" | grep -o 'ExitCode=[0-9:]*')";;
    *) bad "$what: JobState '$st' after $dt s"; tail -5 "$tmp/$jid.out"; scancel "$jid" 2>/dev/null ;; esac
done

# --- 5. node NODE down|up (issue 49 item 18): down kills every process of the
# node (a running job's ranks and slurmd included); `up` starts a dead slurmd
# again, and so does `node NODE up`, which returns the node to service
jid=$(sb "ZERO=1,B=2,T=64,STEPS=1000")
for i in $(seq 1 300); do grep -qE "^step +2/" "$tmp/$jid.out" 2>/dev/null && break; sleep 0.2; done
before=$(ip netns pids $NAME-node1 | wc -l)
out=$($CL node $NAME-node1 down 2>&1); left=$(ip netns pids $NAME-node1 | wc -l)
spid=$(cat /run/llmc-cluster/$NAME/slurm/slurmd.$NAME-node1.pid 2>/dev/null)
gone() { [ ! -e "/proc/$1/stat" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }   # a zombie is dead, not yet reaped
for i in $(seq 1 20); do gone "$spid" && break; sleep 0.1; done
if [ "$before" -ge 3 ] && [ "$left" = 0 ] && gone "$spid" && grep -q "^cluster $NAME: $NAME-node1 down (" <<< "$out"; then
  ok "node $NAME-node1 down: '$out': $before processes on the node (slurmd, the job's step and ranks), none left"
else bad "node down: '$out': $before processes before, $left after, slurmd $spid $(gone "$spid" || echo alive)"; fi
scancel "$jid" 2>/dev/null
out=$(timeout 60 $CL up 2 --slurm $MEMARG 2>&1); spid=$(cat /run/llmc-cluster/$NAME/slurm/slurmd.$NAME-node1.pid 2>/dev/null)
if grep -q "slurmd on $NAME-node1 was not running: started" <<< "$out" && [ "$(cat /proc/$spid/comm 2>/dev/null)" = slurmd ]; then
  ok "up 2 --slurm on the running cluster starts node 1's dead slurmd again (pid $spid)"
else bad "up 2 --slurm after node down: '$out', slurmd pid '$spid'"; fi
$CL node $NAME-node1 down > /dev/null 2>&1
out=$(timeout 60 $CL node $NAME-node1 up 2>&1); spid=$(cat /run/llmc-cluster/$NAME/slurm/slurmd.$NAME-node1.pid 2>/dev/null)
jid=$(sb "ZERO=1,B=2,T=64,STEPS=2"); st=$(wait_state "$jid" 120)
if grep -q "^cluster $NAME: $NAME-node1 up (link up, slurmd started, Slurm: idle)$" <<< "$out" && [ "$(cat /proc/$spid/comm 2>/dev/null)" = slurmd ] && [ "$st" = COMPLETED ]; then
  ok "node $NAME-node1 up: '$out'; a 2-node job then completes"
else bad "node up: '$out'; a 2-node job after it: $st"; tail -3 "$tmp/$jid.out"; fi

# --- 4. down
$CL down >/dev/null 2>&1
left=$(pgrep -c -f "/run/llmc-cluster/$NAME/slurm" 2>/dev/null)
[ "${left:-0}" = 0 ] && ! grep -q "# llmc-cluster $NAME$" /etc/hosts && ok "down: no slurmctld, slurmd or munged of the cluster left, no /etc/hosts line" \
  || bad "down left $left daemons or /etc/hosts lines"
summary
