#!/usr/bin/env bash
# run_multinode.sh: train across several nodes with mpirun and a hostfile.
#   GPU (default): one rank per GPU, NCCL over InfiniBand/RoCE or sockets
#     HOSTFILE=hosts.txt NODES=4 ZERO=3 bash scripts/run_multinode.sh -e d48 -o /shared/out
#   CPU (CPU=1): ./train_gpt_cpu, PER_NODE ranks per node, each with
#     cores / PER_NODE OpenMP threads (or OMP_NUM_THREADS when set)
#     HOSTFILE=hosts.txt CPU=1 NODES=2 PER_NODE=2 ZERO=1 bash scripts/run_multinode.sh -e d4
# hosts.txt, one node per line:   node01 slots=8
# The repository (with the program built) and the data must be at the same
# path on every node (a shared file system): checkpoints are written by all
# ranks into one file.
#
# To try it on one machine, on simulated nodes (scripts/cluster.sh):
#   scripts/cluster.sh up 2 --rate 1gbit
#   eval "$(scripts/cluster.sh env)"   # Open MPI's rsh agent, interfaces, binding
#   HOSTFILE=$(scripts/cluster.sh hostfile) CPU=1 NODES=2 PER_NODE=2 bash scripts/run_multinode.sh -e d2 -x 5
#
# The flags that shape the parallel run (environment -> trainer flag):
#   NODES=2      nodes; ranks = NODES*PER_NODE, placed PER_NODE per node
#   PER_NODE     ranks per node: GPU default 8 (one per GPU, rank r uses the
#                GPU of its local rank; GPUS=8 is the same variable's old
#                name), CPU default 1 (all cores of a node to one rank)
#   ZERO=3       -z: ZeRO stage; 0 DDP, 1 optimizer states sharded, 2 + grads,
#                3 + params (for models that do not fit otherwise)
#   B            -b: micro-batch per rank (sequences); GPU 8, CPU 8
#   T            -t: sequence length; GPU 1024, CPU 128
#   TOTAL        -d: tokens per optimizer step over all ranks; a multiple of
#                B*T*NODES*PER_NODE (the quotient = grad-accumulation
#                micro-steps); GPU 524288, CPU unset (= B*T*ranks, no accumulation)
#   STEPS        -x: optimizer steps; GPU 5000, CPU 500
#   MPIRUN=mpirun   the launcher (as root, --allow-run-as-root is added)
#   DRYRUN=1     print the command instead of running it (the one this
#                script runs: bash scripts/mpirun_fg.sh mpirun ...; with
#                ELASTIC=1 the loop's first launch, its hostfile the temp
#                file of the nodes left, named by its mktemp template)
#   ELASTIC=1    a job that loses a node finishes by itself (needs -o DIR):
#                when mpirun fails, each node of the hostfile is probed (a
#                one-process mpirun on it, ELASTIC_PROBE_S=30 s at most);
#                without the lost ones mpirun starts again (PER_NODE ranks
#                on each node left) with -y 1 from the latest complete
#                checkpoint and the same -d (fixed at B*T*ranks of the first
#                launch when TOTAL is unset), until the run completes or
#                fewer than MIN_NODES (default 1) remain; one line per event
#                (scripts/elastic.sh; docs/faults.md)
# NCCL environment (GPU; set what your cluster needs; exported to every rank):
#   NCCL_SOCKET_IFNAME  interface for NCCL's bootstrap/socket traffic, e.g. eth0 or ib0
#                       (also used as Open MPI's TCP interface below)
#   NCCL_IB_HCA         InfiniBand HCAs to use, e.g. mlx5_0,mlx5_1 (unset: all)
#   NCCL_DEBUG=WARN     INFO to see the chosen transport/rings at start-up
# LLMC_GPU_TIMEOUT (seconds, default 900): a rank waiting longer than this
# for the GPU (e.g. a collective whose peer died) aborts the whole job.
# Faults (docs/faults.md): Open MPI's daemons send TCP keepalives to
# mpirun after 5 s idle, every 2 s, 5 of them (oob_tcp_keepalive_*), so a
# node whose link is cut is declared lost within 15 s and the job ends
# (the default, 300 + 9 x 20 s, lets it wait for ever); on SIGTERM mpirun
# passes SIGTERM to the ranks odls_base_sigkill_timeout = 10 s later and
# SIGKILLs them 10 s after that, the time a rank has to finish its step and
# write its checkpoint (SIGUSR1 to mpirun reaches the ranks at once).
# OMPI_MCA_* in the environment override these. Ctrl-C reaches the ranks at
# once: mpirun runs through scripts/mpirun_fg.sh (SIGUSR2, which mpirun
# forwards; the ranks take it as SIGINT: checkpoint, exit 130; a second
# Ctrl-C exits now).
# Every rank's node, local rank and threads are printed at start (placement).
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:?set HOSTFILE to an Open MPI hostfile (node slots=N per line)}
CPU=${CPU:-0}
if [ "$CPU" = 1 ]; then
  PROG=./train_gpt_cpu; PER_NODE=${PER_NODE:-${GPUS:-1}}
  B=${B:-8}; T=${T:-128}; TOTAL=${TOTAL:-}; STEPS=${STEPS:-500}
else
  PROG=./train_gpt; PER_NODE=${PER_NODE:-${GPUS:-8}}
  B=${B:-8}; T=${T:-1024}; TOTAL=${TOTAL:-524288}; STEPS=${STEPS:-5000}
fi
NODES=${NODES:-2}; NP=$((NODES * PER_NODE)); ZERO=${ZERO:-3}
MPIRUN=${MPIRUN:-mpirun}
launcher=("$MPIRUN")
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
# --bind-to none: GPU ranks drive a GPU; CPU ranks spread their OpenMP threads over the node's cores
launcher+=(-np "$NP" --hostfile "$HOSTFILE" --map-by "ppr:$PER_NODE:node" --bind-to none)
for kv in oob_tcp_keepalive_time=5 oob_tcp_keepalive_intvl=2 oob_tcp_keepalive_probes=5 odls_base_sigkill_timeout=10; do
  v=OMPI_MCA_${kv%%=*}; [ -n "${!v:-}" ] || launcher+=(--mca "${kv%%=*}" "${kv#*=}")
done
# ELASTIC=1 with --shard-group (HSDP): the survivors of a lost node time out
# in their collective (--collective-timeout, 60 s unless given) and then
# write the checkpoint of their last step (llmc/rescue.h); mpirun SIGKILLs
# them twice the kill delay after it hears of the loss (at once when the
# node's daemon dies), so a kill delay (this script's or the environment's)
# below (timeout + 20 s) / 2 is raised to it, with one line: the SIGKILL
# then comes 20 s after the timeout at the earliest, time for the write.
if [ "${ELASTIC:-0}" = 1 ] && printf '%s\n' "$@" | grep -qx -- --shard-group; then
  ct=60; prev=""; for a in "$@"; do [ "$prev" = --collective-timeout ] && ct=$a; prev=$a; done
  ct=${ct%%.*}; [[ "$ct" =~ ^[0-9]+$ ]] || ct=60
  kd=${OMPI_MCA_odls_base_sigkill_timeout:-10}; need=$(( (ct + 21) / 2 ))
  if [ "$ct" -gt 0 ] && [[ "$kd" =~ ^[0-9]+$ ]] && [ "$need" -gt "$kd" ]; then
    for i in "${!launcher[@]}"; do [ "${launcher[$i]}" = odls_base_sigkill_timeout ] && launcher[$((i + 1))]=$need; done
    [ -n "${OMPI_MCA_odls_base_sigkill_timeout:-}" ] && launcher+=(--mca odls_base_sigkill_timeout "$need")
    [ "${DRYRUN:-0}" = 1 ] || echo "elastic: --shard-group: mpirun's kill delay raised from $kd to $need s, so that the survivors of a lost node can write their checkpoint after the $ct s collective timeout (docs/faults.md)" >&2
  fi
fi
if [ "$CPU" = 1 ]; then
  [ -n "${OMP_NUM_THREADS:-}" ] && launcher+=(-x OMP_NUM_THREADS)
else
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  launcher+=(-x NCCL_DEBUG -x LD_LIBRARY_PATH -x PATH -x "LLMC_GPU_TIMEOUT=${LLMC_GPU_TIMEOUT:-900}")
  [ -n "${NCCL_IB_HCA:-}" ] && launcher+=(-x NCCL_IB_HCA)
fi
[ -n "${NCCL_SOCKET_IFNAME:-}" ] && launcher+=(-x NCCL_SOCKET_IFNAME --mca btl_tcp_if_include "$NCCL_SOCKET_IFNAME" --mca oob_tcp_if_include "$NCCL_SOCKET_IFNAME")
# ELASTIC=1: the global batch stays that of the first launch (-d), whatever the ranks left
if [ "${ELASTIC:-0}" = 1 ] && [ -z "$TOTAL" ] && ! printf '%s\n' "$@" | grep -qx -- -d; then TOTAL=$((B * T * NP)); fi
train=("$PROG" -z "$ZERO" -b "$B" -t "$T")
[ -n "$TOTAL" ] && train+=(-d "$TOTAL")
train+=(-x "$STEPS" "$@")
# the elastic loop's launch (el_launch below): the launcher without -np and
# --hostfile, then those of the nodes left (hostfile $1), the program
el_cmd() { # hostfile nodes ranks-per-node args...: the launcher with -np, --hostfile and --map-by of those nodes
  local hf=$1 nn=$2 pn=$3 n l=() skip=0; shift 3
  for n in "${launcher[@]}"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    case "$n" in -np|--hostfile|--map-by) skip=1; continue ;; esac
    l+=("$n")
  done
  EL_CMD=(bash scripts/mpirun_fg.sh "${l[@]}" -np $(( nn * pn )) --hostfile "$hf" --map-by "ppr:$pn:node" "$@")
}
if [ "${DRYRUN:-0}" = 1 ]; then
  if [ "${ELASTIC:-0}" = 1 ]; then
    el_cmd "${TMPDIR:-/tmp}/llmc-elastic.XXXXXX.hosts" "$NODES" "$PER_NODE" "${train[@]}"
    printf '%q ' "${EL_CMD[@]}" | sed 's/ $//'
  else
    printf '%q ' bash scripts/mpirun_fg.sh "${launcher[@]}" "${train[@]}" | sed 's/ $//'
  fi
  echo; exit 0
fi
if [ ! -x "$PROG" ]; then
  if [ "$CPU" = 1 ]; then make train_gpt_cpu; else make -f cuda.mk cuda; fi
fi
if [ "${ELASTIC:-0}" = 1 ]; then   # relaunch on the nodes that remain (scripts/elastic.sh)
  . scripts/elastic.sh
  mapfile -t EL_NODES < <(awk 'NF && $1 !~ /^#/ {print $1}' "$HOSTFILE" | head -n "$NODES")
  EL_PER_NODE=$PER_NODE; EL_MIN_NODES=${MIN_NODES:-1}
  EL_OUT=""; prev=""; for a in "$@"; do [ "$prev" = -o ] && EL_OUT=$a; prev=$a; done
  EL_LOG=$(mktemp "${TMPDIR:-/tmp}/llmc-elastic.XXXXXX"); hosts=$EL_LOG.hosts
  base=("${train[@]:0:$(( ${#train[@]} - $# ))}")   # the program and the script's flags; the user's follow
  EL_BASE=("${base[@]}")
  # launcher with -np, --hostfile and --map-by of the nodes left and their
  # ranks per node (the first launch's are replaced; elastic_layout)
  el_launch() {
    local n
    for n in "${EL_NODES[@]}"; do echo "$n slots=$EL_PER_NODE"; done > "$hosts"
    el_cmd "$hosts" ${#EL_NODES[@]} "$EL_PER_NODE" "${base[@]}" "$@"
    "${EL_CMD[@]}" > >(tee -a "$EL_LOG") 2>&1
  }
  el_probe() {
    local m=("$MPIRUN"); [ "$(id -u)" = 0 ] && m+=(--allow-run-as-root)
    timeout "${ELASTIC_PROBE_S:-30}" "${m[@]}" -np 1 --host "$1" true > /dev/null 2>&1
  }
  set +e
  elastic_loop "$@"; rc=$?
  rm -f "$EL_LOG" "$hosts"
  exit $rc
fi
exec bash scripts/mpirun_fg.sh "${launcher[@]}" "${train[@]}"
