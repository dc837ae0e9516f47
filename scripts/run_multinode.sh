#!/usr/bin/env bash
# run_multinode.sh: train across several nodes with mpirun and a hostfile,
# one rank per GPU (8 per node), NCCL over InfiniBand/RoCE or sockets.
#   HOSTFILE=hosts.txt NODES=4 ZERO=3 bash scripts/run_multinode.sh -e d48 -o /shared/out
# hosts.txt, one node per line:   node01 slots=8
# The repository (with ./train_gpt built) and the data must be at the same
# path on every node (a shared file system): checkpoints are written by all
# ranks into one file.
#
# The flags that shape the parallel run (environment -> trainer flag):
#   NODES=2, GPUS=8   ranks = NODES*GPUS; rank r runs on GPU (its local rank)
#   ZERO=3       -z: ZeRO stage; 0 DDP, 1 optimizer states sharded, 2 + grads,
#                3 + params (for models that do not fit otherwise)
#   B=8          -b: micro-batch per rank (sequences)
#   T=1024       -t: sequence length
#   TOTAL=524288 -d: tokens per optimizer step over all ranks; a multiple of
#                B*T*NODES*GPUS (the quotient = grad-accumulation micro-steps)
#   STEPS=5000   -x: optimizer steps
# NCCL environment (set what your cluster needs; exported to every rank):
#   NCCL_SOCKET_IFNAME  interface for NCCL's bootstrap/socket traffic, e.g. eth0 or ib0
#                       (also used as Open MPI's TCP interface below)
#   NCCL_IB_HCA         InfiniBand HCAs to use, e.g. mlx5_0,mlx5_1 (unset: all)
#   NCCL_DEBUG=WARN     INFO to see the chosen transport/rings at start-up
# LLMC_GPU_TIMEOUT (seconds, default 900): a rank waiting longer than this
# for the GPU (e.g. a collective whose peer died) aborts the whole job.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:?set HOSTFILE to an Open MPI hostfile (node slots=8 per line)}
NODES=${NODES:-2}; GPUS=${GPUS:-8}; NP=$((NODES * GPUS))
ZERO=${ZERO:-3}; B=${B:-8}; T=${T:-1024}; TOTAL=${TOTAL:-524288}; STEPS=${STEPS:-5000}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
envs=(-x NCCL_DEBUG -x LD_LIBRARY_PATH -x PATH -x LLMC_GPU_TIMEOUT=${LLMC_GPU_TIMEOUT:-900})
[ -n "${NCCL_SOCKET_IFNAME:-}" ] && envs+=(-x NCCL_SOCKET_IFNAME --mca btl_tcp_if_include "$NCCL_SOCKET_IFNAME" --mca oob_tcp_if_include "$NCCL_SOCKET_IFNAME")
[ -n "${NCCL_IB_HCA:-}" ] && envs+=(-x NCCL_IB_HCA)
exec mpirun -np "$NP" --hostfile "$HOSTFILE" --map-by ppr:"$GPUS":node --bind-to none "${envs[@]}" \
  ./train_gpt -z "$ZERO" -b "$B" -t "$T" -d "$TOTAL" -x "$STEPS" "$@"
