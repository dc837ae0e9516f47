# scripts/elastic.sh: the relaunch loop of an elastic job (ELASTIC=1 in
# scripts/run_slurm.sbatch and scripts/run_multinode.sh), sourced by them;
# not a program of its own.
#
# A job that loses a node finishes by itself: the step (srun, or mpirun on
# a hostfile) runs on the nodes in EL_NODES; when it fails, each node is
# probed (el_probe NODE, the launcher's: a one-task srun or mpirun on that
# node, under a timeout); nodes that do not answer are lost, and the step is
# launched again on the others, with -y 1 (from the latest complete
# checkpoint in -o: model_S.bin beside state_S.bin) and the same -d (the
# caller fixes -d before the first launch, so the global batch and the data
# order do not change: docs/resume.md) in a layout of the survivors that
# holds it (elastic_layout: a smaller -b or more micro-steps; with
# --invariant 1 powers of two), until it completes or fewer than
# EL_MIN_NODES remain, or no layout holds -d. One line per event, e.g.
#   elastic: lost llmcslurm-node1 at step 12; continuing on 1 node (2 ranks) from checkpoint 10; layout -b 2, 2 micro-steps, -d 512 kept (probed in 1.2 s)
# A failure with every node answering (a bad flag, a diverged run, a bug)
# is not a lost node: the loop stops with the step's exit status, as does a
# stop by a signal (130, 138, 143: the ranks wrote their checkpoint; a
# requeue, not a relaunch, goes on from it).
# With --shard-group (HSDP) the surviving shard group writes the checkpoint
# of its last completed step before it exits (llmc/rescue.h: the line
# "rescue: wrote checkpoint S ...", exit 75); the relaunch goes on from it
# and its line says so:
#   elastic: lost llmcslurm-node1 at step 12; continuing on 1 node (2 ranks) from checkpoint 12 (written by the survivors; probed in 1.2 s)
# The line, not the exit code, is what counts: mpirun reports its own code
# once it has lost a daemon.
# Each relaunch passes --lock-takeover with every node lost so far (and the
# caller's own --lock-takeover hosts): a shared file system (NFS, Lustre)
# keeps the -o lock of a run whose node is gone (NFSv4 until its state
# expires, NFSv3 until it reboots, Lustre until eviction), so without it a
# relaunch after losing rank 0's node would be refused by its own dead run
# (docs/resume.md). The node names must be the hosts' names (Slurm's node
# names, the hostfile's host names; an IP address does not match the host
# name the lock file holds).
#
# The caller sets:
#   EL_NODES      array: the nodes of the first launch, in rank order
#   EL_PER_NODE   ranks per node (of the first launch; a relaunch may take
#                 fewer: elastic_layout)
#   EL_BASE       array: the trainer's flags the caller puts before ARGS
#                 (the program, -b, -t, -d): read for the layout
#   EL_MIN_NODES  stop when fewer nodes than this remain (>= 1)
#   EL_OUT        the trainer's -o directory (required: the checkpoints)
#   EL_LOG        a file the step's output is copied to (its step lines)
#   el_launch     function: runs the step on "${EL_NODES[@]}" with the
#                 trainer arguments "$@" in the foreground; its exit status
#   el_probe      function NODE: 0 if the node runs a task within its timeout
# and calls elastic_loop TRAINER_ARGS..., whose exit status is the job's.

# elastic_latest DIR: the latest step S with DIR/model_S.bin and
# DIR/state_S.bin both present (the trainer renames them from .tmp only when
# every rank finished), as a number; empty if none.
elastic_latest() {
  local s latest=""
  [ -d "$1" ] || return 0
  for s in $(ls "$1" 2>/dev/null | sed -n 's/^state_\([0-9]\{8,10\}\)\.bin$/\1/p' | sort -n); do
    [ -f "$1/model_$s.bin" ] && latest=$((10#$s))
  done
  echo "$latest"
}

# elastic_args ARGS...: the trainer arguments of a relaunch into EL_ARGS:
# ARGS with -y 1 (once), and without `-e FILE` when -o holds a checkpoint
# (the checkpoint holds the weights; the trainer refuses -e FILE with -y 1
# then); `-e dN` stays (it names the model).
elastic_args() {
  local a prev="" drop=0 init="" have=""
  for a in "$@"; do [ "$prev" = -e ] && init=$a; prev=$a; done
  have=$(elastic_latest "$EL_OUT")
  [ -n "$have" ] && [ -n "$init" ] && [[ ! "$init" =~ ^d[0-9]+$ ]] && drop=1
  EL_ARGS=(); prev=""
  local y=0
  for a in "$@"; do
    if [ $drop = 1 ] && [ "$a" = -e ]; then prev=-e; continue; fi
    if [ $drop = 1 ] && [ "$prev" = -e ]; then prev=""; continue; fi
    [ "$prev" = -y ] && [ "$a" = 1 ] && y=1
    EL_ARGS+=("$a"); prev=$a
  done
  [ $y = 1 ] || EL_ARGS+=(-y 1)
}

# elastic_flag NAME ARGS...: the value of the last NAME VALUE in ARGS (the
# trainer takes the last one), or empty.
elastic_flag() {
  local n=$1 a prev="" v=""; shift
  for a in "$@"; do [ "$prev" = "$n" ] && v=$a; prev=$a; done
  echo "$v"
}

# elastic_layout NODES PER_NODE B T D INV: the layout of a relaunch on NODES
# surviving nodes (PER_NODE ranks each at most, the first launch's) that
# keeps the global batch D tokens per step (so the data order and, with
# --invariant 1, the numbers stay those of the run: docs/resume.md), as
# "m p b a": m nodes x p ranks per node, -b b <= B, a micro-steps, with
# D = b * T * m * p * a; the most ranks first, then the largest b, then the
# most ranks per node. With INV = 1 (--invariant 1) the rank count, b and a
# are powers of two (the trainer's rule), so some survivors may stay idle.
# Prints nothing when no layout holds D (then the relaunch is refused).
elastic_layout() {
  local nodes=$1 per=$2 B=$3 T=$4 D=$5 inv=$6 m p b q best="" bR=0 bb=0 bp=0 R
  pow2() { [ "$1" -ge 1 ] && [ $(( $1 & ($1 - 1) )) = 0 ]; }
  for ((m = 1; m <= nodes; m++)); do
    for ((p = 1; p <= per; p++)); do
      R=$((m * p))
      [ "$inv" = 1 ] && ! pow2 $R && continue
      [ $((D % (T * R))) = 0 ] || continue
      q=$((D / (T * R)))
      for ((b = (B < q ? B : q); b >= 1; b--)); do
        [ $((q % b)) = 0 ] || continue
        [ "$inv" = 1 ] && { pow2 $b && pow2 $((q / b)) || continue; }
        break
      done
      [ "$b" -ge 1 ] || continue
      if [ $R -gt $bR ] || { [ $R = $bR ] && [ $b -gt $bb ]; } || { [ $R = $bR ] && [ $b = $bb ] && [ $p -gt $bp ]; }; then
        best="$m $p $b $((q / b))"; bR=$R; bb=$b; bp=$p
      fi
    done
  done
  echo "$best"
}

# elastic_rescued LOG FROM: the step S of the last "rescue: wrote checkpoint
# S ..." line in LOG after its first FROM lines (this launch's output), or
# empty.
elastic_rescued() {
  tail -n +"$(( $2 + 1 ))" "$1" 2>/dev/null | sed -n 's/^rescue: wrote checkpoint \([0-9][0-9]*\) .*/\1/p' | tail -1
}

# elastic_last_step LOG: the number of the last "step N/..." line in LOG.
elastic_last_step() {
  sed -n 's/^step *\([0-9][0-9]*\)\/.*/\1/p' "$1" 2>/dev/null | tail -1
}

# elastic_loop ARGS...: launch, and relaunch on the surviving nodes (above).
elastic_loop() {
  local rc n launch=0 t_end t_start ck step from rescued by takeover
  local -a keep lost gone=() args=("$@")
  [ -n "${EL_OUT:-}" ] || { echo "elastic: ELASTIC=1 needs -o DIR (the checkpoints a relaunch continues from)" >&2; return 1; }
  [ "${EL_MIN_NODES:-1}" -ge 1 ] 2>/dev/null || { echo "elastic: MIN_NODES=$EL_MIN_NODES: must be an integer >= 1" >&2; return 1; }
  while :; do
    launch=$((launch + 1))
    from=$(wc -l < "$EL_LOG" 2>/dev/null || echo 0)
    if [ $launch = 1 ]; then
      el_launch "${args[@]}"; rc=$?
    else
      elastic_args "${args[@]}"
      # the lost nodes' runs may still hold the -o lock (a shared file system): take it over (above)
      takeover=$(elastic_flag --lock-takeover "${args[@]}")
      takeover=$(IFS=,; echo "${takeover:+$takeover,}${gone[*]}")
      el_launch "${EL_ARGS[@]}" --lock-takeover "$takeover"; rc=$?
    fi
    t_end=$(date +%s.%N)
    if [ $rc = 0 ]; then
      local nr=$((launch - 1 + ${ELASTIC_RELAUNCHES:-0}))
      echo "elastic: completed on ${#EL_NODES[@]} node$([ ${#EL_NODES[@]} = 1 ] || echo s) ($(( ${#EL_NODES[@]} * EL_PER_NODE )) ranks) after $nr relaunch$([ $nr = 1 ] || echo es)" >&2
      return 0
    fi
    case $rc in 130|138|143)
      echo "elastic: the step was stopped by a signal (exit $rc; its ranks wrote their checkpoint): not a lost node, no relaunch" >&2
      return $rc ;;
    esac
    keep=(); lost=()
    local -a pids=()
    for n in "${EL_NODES[@]}"; do el_probe "$n" & pids+=($!); done   # all nodes at once: one timeout, not one per lost node
    local i=0
    for n in "${EL_NODES[@]}"; do
      if wait "${pids[$i]}"; then keep+=("$n"); else lost+=("$n"); fi
      i=$((i + 1))
    done
    step=$(elastic_last_step "$EL_LOG")
    rescued=$(elastic_rescued "$EL_LOG" "$from")
    if [ ${#lost[@]} = 0 ]; then
      echo "elastic: the step failed (exit $rc) at step ${step:-0} with every node answering: not a lost node, no relaunch$([ -n "$rescued" ] && echo " (the ranks wrote checkpoint $rescued: -y 1 goes on from it)")" >&2
      return $rc
    fi
    ck=$(elastic_latest "$EL_OUT")
    by=""
    [ -n "$rescued" ] && [ "$rescued" = "$ck" ] && by="written by the survivors; "
    if [ ${#keep[@]} -lt "$EL_MIN_NODES" ]; then
      echo "elastic: lost ${lost[*]} at step ${step:-0}; ${#keep[@]} node$([ ${#keep[@]} = 1 ] || echo s) remain, fewer than MIN_NODES=$EL_MIN_NODES: stopping (exit $rc; checkpoint ${ck:-none} in $EL_OUT)" >&2
      return $rc
    fi
    t_start=$(date +%s.%N)
    # the layout of the survivors that keeps -d (elastic_layout)
    local B T D inv lay m p b a idle=""
    B=$(elastic_flag -b "${EL_BASE[@]}" "${args[@]}"); T=$(elastic_flag -t "${EL_BASE[@]}" "${args[@]}")
    D=$(elastic_flag -d "${EL_BASE[@]}" "${args[@]}"); inv=$(elastic_flag --invariant "${EL_BASE[@]}" "${args[@]}")
    [ -n "$D" ] || D=$((B * T * ${#EL_NODES[@]} * EL_PER_NODE))
    lay=$(elastic_layout ${#keep[@]} "$EL_PER_NODE" "$B" "$T" "$D" "${inv:-0}")
    if [ -z "$lay" ]; then
      echo "elastic: lost ${lost[*]} at step ${step:-0}; no layout of the ${#keep[@]} node$([ ${#keep[@]} = 1 ] || echo s) left (up to $EL_PER_NODE ranks each, -b up to $B, T=$T$([ "${inv:-0}" = 1 ] && echo ", --invariant 1: ranks, -b and micro-steps powers of two")) holds -d $D: stopping (exit $rc; checkpoint ${ck:-none} in $EL_OUT)" >&2
      return $rc
    fi
    read -r m p b a <<< "$lay"
    [ "$m" -lt ${#keep[@]} ] && idle="; ${keep[*]:$m} left idle"
    echo "elastic: lost ${lost[*]} at step ${step:-0}; continuing on $m node$([ "$m" = 1 ] || echo s) ($((m * p)) ranks) from checkpoint ${ck:-none (a fresh start)}; layout -b $b, $a micro-step$([ "$a" = 1 ] || echo s), -d $D kept$([ "${inv:-0}" = 1 ] && echo " (--invariant 1: powers of two)")$idle (${by}probed in $(awk -v a="$t_end" -v b="$t_start" 'BEGIN { printf "%.1f", b - a }') s)" >&2
    gone+=("${lost[@]}")
    EL_NODES=("${keep[@]:0:$m}"); EL_PER_NODE=$p
    args=("${args[@]}" -b "$b")
  done
}

# elastic_guard JOB BATCH_HOST PER_NODE SCRIPT ARGS... (Slurm only): the
# batch script runs on the job's first node (its batch host), so losing that
# node ends the relaunch loop itself. With sbatch --no-kill, Slurm then takes
# the node out of the job once slurmctld has marked it DOWN (SlurmdTimeout,
# slurm.conf: 300 s by default) and keeps the job RUNNING on the others,
# with nothing left to run it (measured on the simulated cluster with Slurm
# 22.05); --requeue cannot help there (a --no-kill job is shrunk, not
# requeued, and a requeue would kill this guard before it could shrink the
# pending job to the nodes left: a running job's node count cannot be
# updated). So run_slurm.sbatch starts this guard as a one-task step
# (srun --overlap) on another node of the job. Every ELASTIC_GUARD_S (2) s it
# reads the job (scontrol show job); when BATCH_HOST is no longer among the
# job's nodes it submits the same SCRIPT with ARGS again as a new job on the
# nodes that remain (sbatch --no-kill --nodes=m --ntasks-per-node=p, the
# same job name, output file (appended), cpus per task, gpus per node and
# time limit; B and TOTAL of the layout that keeps -d: elastic_layout), with
# ELASTIC_LOST=BATCH_HOST (its runs take over the lost host's -o lock) and
# ELASTIC_RELAUNCHES one more; the new job's batch script resumes from the
# latest complete checkpoint (-y 1) and runs the relaunch loop again. It
# appends the event's line to the job's output, then cancels the old job
# (scancel: its state is CANCELLED; the work goes on as the new job), e.g.
#   elastic: lost llmcslurm-node0 at step 14; continuing on 2 nodes (2 ranks) from checkpoint 10; layout -b 1, 3 micro-steps, -d 384 kept (the batch host: continued as job 8 of 2 nodes, submitted by the guard on llmcslurm-node2, 31.2 s after the step's last line)
# It returns when the job is no longer RUNNING (the batch script's end
# cancels its steps, the guard's too). The caller sets EL_OUT (-o DIR),
# EL_MIN_NODES, and EL_GUARD_B, EL_GUARD_T, EL_GUARD_D: the -b, -t and -d
# the script passes before ARGS (a run process of its own: no arrays).
elastic_guard() {
  local job=$1 bh=$2 per=$3 script=$4 info st nl out in n B T D inv lay m p b a ck step jid tl gpn last; shift 4
  local -a nodes
  while sleep "${ELASTIC_GUARD_S:-2}"; do
    info=$(scontrol -o show job "$job" 2>/dev/null) || continue
    st=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")
    [ "$st" = RUNNING ] || return 0
    nl=$(sed -n 's/.* NodeList=\([^ ]*\).*/\1/p' <<< "$info")
    [ -n "$nl" ] && [ "$nl" != "(null)" ] || continue
    mapfile -t nodes < <(scontrol show hostnames "$nl")
    in=0; for n in "${nodes[@]}"; do [ "$n" = "$bh" ] && in=1; done
    [ $in = 1 ] && continue
    out=$(sed -n 's/.* StdOut=\([^ ]*\).*/\1/p' <<< "$info")
    last=$(stat -c %Y "$out" 2>/dev/null || date +%s)
    # the script's -b -t -d (EL_GUARD_B, _T, _D), then the user's ARGS: the last one counts
    B=$(elastic_flag -b -b "$EL_GUARD_B" "$@"); T=$(elastic_flag -t -t "$EL_GUARD_T" "$@")
    D=$(elastic_flag -d -d "$EL_GUARD_D" "$@"); inv=$(elastic_flag --invariant "$@")
    step=$(elastic_last_step "$out"); ck=$(elastic_latest "$EL_OUT")
    lay=$(elastic_layout ${#nodes[@]} "$per" "$B" "$T" "$D" "${inv:-0}")
    if [ ${#nodes[@]} -lt "${EL_MIN_NODES:-1}" ] || [ -z "$lay" ]; then
      echo "elastic: lost $bh (the batch host) at step ${step:-0}; $([ -z "$lay" ] && echo "no layout of the ${#nodes[@]} nodes left holds -d $D" || echo "${#nodes[@]} nodes remain, fewer than MIN_NODES=$EL_MIN_NODES"): stopping (checkpoint ${ck:-none} in $EL_OUT; the guard cancels job $job)" >> "$out"
      scancel "$job"; return 1
    fi
    read -r m p b a <<< "$lay"
    tl=$(sed -n 's/.* TimeLimit=\([^ ]*\).*/\1/p' <<< "$info")
    gpn=${SLURM_GPUS_PER_NODE:-0}
    # the new job is not a step of this one: none of this job's SLURM_* variables (SLURM_CONF stays)
    jid=$(env $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p' | grep -vx SLURM_CONF | sed 's/^/-u /') \
          sbatch --parsable --no-kill --nodes="$m" --ntasks-per-node="$p" --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
            --gpus-per-node="$gpn" ${tl:+--time="$tl"} --job-name="${SLURM_JOB_NAME:-llmc-zero}" --output="$out" --open-mode=append \
            --chdir="$PWD" --export="ALL,B=$b,TOTAL=$D,ELASTIC=1,ELASTIC_LOST=$bh,ELASTIC_RELAUNCHES=$(( ${ELASTIC_RELAUNCHES:-0} + 1 ))" \
            "$script" "$@" 2>&1)
    if ! [[ "$jid" =~ ^[0-9]+$ ]]; then
      echo "elastic: lost $bh (the batch host) at step ${step:-0}; the guard's sbatch of the next job failed: $jid: stopping (checkpoint ${ck:-none} in $EL_OUT; resume with sbatch ... -y 1)" >> "$out"
      scancel "$job"; return 1
    fi
    echo "elastic: lost $bh at step ${step:-0}; continuing on $m node$([ "$m" = 1 ] || echo s) ($((m * p)) ranks) from checkpoint ${ck:-none (a fresh start)}; layout -b $b, $a micro-step$([ "$a" = 1 ] || echo s), -d $D kept$([ "${inv:-0}" = 1 ] && echo " (--invariant 1: powers of two)") (the batch host: continued as job $jid of $m node$([ "$m" = 1 ] || echo s), submitted by the guard on $(hostname), $(( $(date +%s) - last )) s after the job's last line)" >> "$out"
    scancel "$job"
    return 0
  done
}
