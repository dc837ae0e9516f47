#!/usr/bin/env bash
# run_1node.sh: train GPT-2 on ONE node with 8 GPUs, one MPI rank per GPU
# (rank r uses GPU r of the node: its local rank). Example:
#   ZERO=2 B=16 TOTAL=524288 STEPS=5000 bash scripts/run_1node.sh -e d12 -o out/d12
#
# The flags that shape the parallel run (environment -> trainer flag):
#   NP=8         ranks (= GPUs); data parallel over all of them
#   ZERO=1       -z: ZeRO stage. 0 = DDP (every rank keeps params, grads and
#                Adam states: 16 bytes/param), 1 = shard the optimizer states,
#                2 = + gradients, 3 = + parameters (gathered unit by unit);
#                more sharding = less memory per GPU, stage 3 = 1.5x traffic
#   B=16         -b: micro-batch per rank, in sequences of T tokens; the
#                largest that fits is the fastest
#   T=1024       -t: sequence length
#   TOTAL=524288 -d: total batch in tokens per optimizer step over all ranks;
#                must be a multiple of B*T*NP, the quotient is the number of
#                gradient-accumulation micro-steps (here 524288/(16*1024*8) = 4)
#   STEPS=2000   -x: optimizer steps
# Stage 3 extras (append to the command line): --prefetch K (blocks gathered
# ahead, overlapping compute), --reshard-after-forward 0 (keep blocks from
# forward to backward: less traffic, more memory).
# Anything else on the command line goes to ./train_gpt (see ./train_gpt -h).
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}; ZERO=${ZERO:-1}; B=${B:-16}; T=${T:-1024}; TOTAL=${TOTAL:-524288}; STEPS=${STEPS:-2000}
[ -x ./train_gpt ] || make -f cuda.mk cuda
# --bind-to none: each rank runs a GPU, not CPU-bound work; NCCL picks NVLink/P2P itself
exec mpirun -np "$NP" --bind-to none -x NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
  ./train_gpt -z "$ZERO" -b "$B" -t "$T" -d "$TOTAL" -x "$STEPS" "$@"
