/*
 zero.h: where every byte lives. A map of the ZeRO engine (llmc/zero/);
 including this header includes all of it, in this order:

   zero/plan.h       the shard plan, built once from one ZeroSpec: units,
                     shards, unit classes, stage-3 slots, the granule; the
                     traffic it predicts per step (the single source of truth)
   zero/ledger.h     every byte by category and tier: predicted from the plan,
                     allocated through ledger_alloc
   zero/estimate.h   the ZeRO paper's closed forms for any Psi and N, and the
                     --estimate table (independent of the plan on purpose)
   zero/engine.h     the runtime: every model-state buffer (master, m, v in
                     memory, host or disk buffers too), gather / release /
                     prefetch of stage-3 units, unit grads and their
                     reduce-scatter, HSDP's all-reduce
   zero/optimizer.h  the step: grad norm, clip, AdamW, the offloaded streaming
                     step and its scratch file (includes engine.h: one way)
   zero/report.h     the ledger and traffic tables, the exit-2 contract

 zero/plan.h and zero/estimate.h need nothing else (the unit tests include
 them alone); zero/ledger.h's allocators need the backend's memory
 functions, and engine.h onwards the Comm and the backend (llmc/cpu/backend.h
 or llmc/cuda/backend.cuh) included first.

 Source: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 Trillion Parameter Models", arXiv:1910.02054, sections 5 and 7; FSDP
 (Zhao et al., arXiv:2304.11277) for units and reshard_after_forward;
 ZeRO-Offload (arXiv:2101.06840) and ZeRO-Infinity (arXiv:2104.07857) for
 the offloaded optimizer.

 Parameters form ONE flat buffer, unit-major (docs/design.md section 1); each
 unit is padded to a multiple of the shard granule and split into N equal
 contiguous shards, rank r owning shard r of every unit. Gradients, fp32
 master weights and Adam m, v use the same coordinates. What each rank holds
 (FULL: every unit; SHARDED: its own shard of every unit):

   stage | params  grads   master/m/v     (p, g = bytes per param / grad elem,
   0     | full    full    full            k = optimizer bytes per param:
   1     | full    full    shard           8 for m+v, +4 for an fp32 master
   2     | full    shard   shard           copy when p < 4)
   3     | shard   shard   shard

 Per-rank model-state bytes (the paper's formulas, Psi = num_parameters):
   stage 0: (p+g+k) Psi;  1: (p+g) Psi + k Psi/N;  2: p Psi + (g+k) Psi/N;
   stage 3: (p+g+k) Psi/N. Mixed-precision Adam (p = g = 2, k = 12) and
   fp32 Adam (p = g = 4, k = 8) both give 16 bytes per parameter: 16 Psi,
   4 Psi + 12 Psi/N, 2 Psi + 14 Psi/N, 16 Psi/N in the first case. The plan
   computes them on the padded sizes, so the ledger matches them to the
   byte; the formula values are printed beside.

 Traffic per optimizer step with A micro-steps (bytes handed to collectives):
   stage 0: all-reduce grads = reduce-scatter g Psi + all-gather g Psi
            (deterministic: the same sums as stages 1-3; "2 Psi")
   stage 1: reduce-scatter grads g Psi + all-gather params p Psi ("2 Psi")
   stage 2: reduce-scatter every micro-step A g Psi + all-gather p Psi
   stage 3: every unit class gathered as its mode says (blocks before
            forward and again before backward, 2 A p Psi_blocks, or A p
            Psi_blocks with reshard_after_forward = 0; units kept for the
            step once), reduce-scatter A g Psi ("3 Psi")
   HSDP (--shard-group G < N): reduce-scatter and all-gather inside the
   group of G ranks, plus an all-reduce of the own shard (g Psi/G) across
   the N/G replica groups.

 Optimizer offload (stages 1-3, --offload-optimizer): the k Psi/N bytes of
 master, m, v move to page-locked host memory (host) or to a scratch file
 per rank (disk), streamed unit by unit; each step then moves 2 k Psi/N
 bytes to and from the disk (or g Psi/N grads down and p Psi/N params up
 over PCIe for host). The same adamw_update on the same elements: bitwise
 the same numbers.
*/
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include "zero/plan.h"
#include "zero/ledger.h"
#include "zero/estimate.h"
#include "zero/engine.h"
#include "zero/optimizer.h"
#include "zero/report.h"

#endif /* LLMC_ZERO_H */
