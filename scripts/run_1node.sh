#!/usr/bin/env bash
# run_1node.sh: train GPT-2 on ONE node.
#   GPU (default): 8 GPUs, one MPI rank per GPU (rank r uses GPU r of the
#   node: its local rank). Example:
#     ZERO=2 B=16 TOTAL=524288 STEPS=5000 bash scripts/run_1node.sh -e d12 -o out/d12
#   CPU (CPU=1): ./train_gpt_cpu on NP ranks (default 2), each with
#   cores / NP OpenMP threads (or OMP_NUM_THREADS when set). Example:
#     CPU=1 NP=2 ZERO=1 bash scripts/run_1node.sh -e d4
#
# The flags that shape the parallel run (environment -> trainer flag):
#   NP           ranks; data parallel over all of them; GPU 8 (= GPUs), CPU 2
#   ZERO=1       -z: ZeRO stage. 0 = DDP (every rank keeps params, grads and
#                Adam states: 16 bytes/param), 1 = shard the optimizer states,
#                2 = + gradients, 3 = + parameters (gathered unit by unit);
#                more sharding = less memory per rank, stage 3 = 1.5x traffic
#   B            -b: micro-batch per rank, in sequences of T tokens; the
#                largest that fits is the fastest; GPU 16, CPU 8
#   T            -t: sequence length; GPU 1024, CPU 128
#   TOTAL        -d: total batch in tokens per optimizer step over all ranks;
#                must be a multiple of B*T*NP, the quotient is the number of
#                gradient-accumulation micro-steps (GPU 524288/(16*1024*8) = 4);
#                CPU: unset (= B*T*NP, no accumulation)
#   STEPS        -x: optimizer steps; GPU 2000, CPU 500
#   MPIRUN=mpirun   the launcher (as root, --allow-run-as-root is added)
#   DRYRUN=1     print the command instead of running it (the one this
#                script runs: bash scripts/mpirun_fg.sh mpirun ...)
# Stage 3 extras (append to the command line): --prefetch K (blocks gathered
# ahead, overlapping compute), --reshard-after-forward 0 (keep blocks from
# forward to backward: less traffic, more memory).
# Anything else on the command line goes to the trainer (see its -h).
# Ctrl-C: mpirun runs through scripts/mpirun_fg.sh, which passes it on to
# every rank at once (as SIGUSR2, which mpirun forwards): the ranks write a
# checkpoint of the step they are in (with -o) and exit 130: resume with
# -y 1; a second Ctrl-C exits now (no partial file; docs/faults.md).
# SIGTERM: mpirun passes SIGTERM to the ranks odls_base_sigkill_timeout =
# 10 s later (set here; OMPI_MCA_* overrides) and SIGKILLs them 10 s after
# that; the ranks write their checkpoint and exit 143.
set -euo pipefail
cd "$(dirname "$0")/.."
CPU=${CPU:-0}
if [ "$CPU" = 1 ]; then
  PROG=./train_gpt_cpu; NP=${NP:-2}; B=${B:-8}; T=${T:-128}; TOTAL=${TOTAL:-}; STEPS=${STEPS:-500}
else
  PROG=./train_gpt; NP=${NP:-8}; B=${B:-16}; T=${T:-1024}; TOTAL=${TOTAL:-524288}; STEPS=${STEPS:-2000}
fi
ZERO=${ZERO:-1}
MPIRUN=${MPIRUN:-mpirun}
launcher=("$MPIRUN")
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
[ -n "${OMPI_MCA_odls_base_sigkill_timeout:-}" ] || launcher+=(--mca odls_base_sigkill_timeout 10)
if [ "$CPU" = 1 ]; then
  # more ranks than cores is allowed (each rank then gets one thread)
  launcher+=(-np "$NP" --oversubscribe --bind-to none)
else
  # --bind-to none: each rank runs a GPU, not CPU-bound work; NCCL picks NVLink/P2P itself
  launcher+=(-np "$NP" --bind-to none -x NCCL_DEBUG="${NCCL_DEBUG:-WARN}")
fi
train=("$PROG" -z "$ZERO" -b "$B" -t "$T")
[ -n "$TOTAL" ] && train+=(-d "$TOTAL")
train+=(-x "$STEPS" "$@")
run=(bash scripts/mpirun_fg.sh "${launcher[@]}" "${train[@]}")
if [ "${DRYRUN:-0}" = 1 ]; then printf '%q ' "${run[@]}" | sed 's/ $//'; echo; exit 0; fi
if [ ! -x "$PROG" ]; then
  if [ "$CPU" = 1 ]; then make train_gpt_cpu; else make -f cuda.mk cuda; fi
fi
exec "${run[@]}"
