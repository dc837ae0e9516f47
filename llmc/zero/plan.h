/*
 zero/plan.h: the shard plan, the single source of truth of where every
 element lives. Built ONCE, by one call (zero_plan_init), from one struct
 that holds every input (ZeroSpec); nothing writes a plan field afterwards,
 and every other part (ledger, engine, optimizer, reports, the estimator's
 model-specific traffic) asks the plan.

 Layout (docs/design.md section 1). Parameters form ONE flat buffer, unit-major;
 the model names the units (GPT-2: llmc/gpt_shard.h). Inside a unit every
 tensor starts at a multiple of ZERO_ALIGN elements; the unit is then padded
 to a multiple of the shard granule (zero_granule: N x R x ZERO_ALIGN
 elements for N ranks in the shard group and R replica groups) and split
 into N equal contiguous shards; rank r owns shard r of every unit.
 Gradients, fp32 master weights and Adam m, v use the same coordinates. A
 buffer is held FULL (all units, padded) or SHARDED (only the own shard of
 every unit, concatenated), as the stage says (llmc/zero.h's table).

 Also here: what the plan predicts per optimizer step for the collectives
 (zero_predict_traffic, zero_plan_traffic_psi) and for an offloaded
 optimizer's tiers (zero_predict_offload_traffic); the memory predictions
 are the ledger's (zero/ledger.h).

 Source: Rajbhandari et al., "ZeRO", arXiv:1910.02054, sections 5 and 7;
 FSDP (Zhao et al., arXiv:2304.11277) for units and reshard_after_forward.
*/
#ifndef LLMC_ZERO_PLAN_H
#define LLMC_ZERO_PLAN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../utils.h"
#include "../traffic.h"
#include "../quant.h"

#define ZERO_ALIGN 16         /* elements; tensor starts and shard sizes are multiples */
/* the quantized records (llmc/quant.h) are whole 4-byte words only when
   shards are multiples of 8 elements (int4: two per byte) */
typedef char zero_align_is_a_multiple_of_8[(ZERO_ALIGN % 8 == 0) ? 1 : -1];
#define ZERO_MAX_TENSORS 65536
#define ZERO_MAX_SLOTS 1024

/* The shard granule: units are padded to a multiple of it so that each of
   the N ranks of a shard group owns an equal shard, and (HSDP) each shard
   splits into R equal parts for the all-reduce across the R replica
   groups, every part a multiple of ZERO_ALIGN elements. The one place it
   is computed (the plan, the model's vocabulary chunking). */
static inline size_t zero_granule(int num_ranks, int replicas) {
    return (size_t)num_ranks * (size_t)replicas * ZERO_ALIGN;
}

typedef struct {
    const char* name;   /* e.g. "qkvw" */
    int unit;           /* 0 = root, l+1 = block l */
    size_t size;        /* elements */
    int decay;          /* 1: weight decay applies (2-D matmul weights and embeddings) */
    size_t offset;      /* elements from the start of its unit (set by the plan) */
} ZeroTensor;

typedef struct {
    size_t size;        /* elements up to the end of its last tensor (aligned) */
    size_t padded;      /* size rounded up to a multiple of N * ZERO_ALIGN */
    size_t shard;       /* padded / N: elements each rank owns */
    size_t offset;      /* start of the unit in a FULL buffer */
    size_t shard_offset;/* start of the unit's own shard in a SHARDED buffer */
    int cls;            /* its unit class (ZeroClass) and its index within the class */
    int idx;
    int first_tensor;   /* its tensors: P->tensors[first_tensor .. + num_tensors) */
    int num_tensors;
    size_t qblocks;     /* qwZ: scales per rank's record (the most blocks of any rank's shard); 0 off */
    size_t sec_offset;  /* hpZ: start of its part in the secondary shard buffer; ZERO_NO_SECONDARY: none */
    size_t qrecord;     /* qwZ: bytes of a rank's record, quant_record_bytes(qblocks, shard, 8); 0 off */
    size_t gblocks;     /* qgZ: scales per shard's record; 0 off */
    size_t grecord;     /* qgZ: bytes of a shard's record, quant_record_bytes(gblocks, shard, bits) */
} ZeroUnit;

/* Unit classes: how stage 3 gathers the units of a class, and how many
   buffers the class needs. The model names its classes (GPT-2: the root
   {wpe, lnf}, the vocabulary chunks of wte, the transformer blocks).
     ZERO_KEEP_STEP   gathered at first use, kept until the optimizer step
                      (FSDP's root unit; each unit moves once per step)
     ZERO_KEEP_MICRO  gathered in forward, kept until its backward is done
                      (reshard_after_forward = 0: once per micro-step)
     ZERO_RESHARD     gathered before each use, freed right after (FSDP's
                      reshard_after_forward = 1: `uses` times per micro-step) */
enum { ZERO_KEEP_STEP = 0, ZERO_KEEP_MICRO, ZERO_RESHARD };
#define ZERO_MAX_CLASSES 4
typedef struct {
    const char* name;
    int mode;            /* ZERO_KEEP_STEP, ZERO_KEEP_MICRO or ZERO_RESHARD */
    int uses;            /* gathers per micro-step of each unit when ZERO_RESHARD */
    int num_units;
    size_t max_padded;   /* largest padded unit of the class (elements) */
    size_t total_padded; /* sum of its units' padded sizes */
    int num_slots;       /* stage 3: gathered buffers of max_padded elements */
    int first_slot;      /* its first slot in the engine's slot table */
    int grad_buffers;    /* stages 2-3: unit-grad buffers of max_padded (2 lets a
                            reduce-scatter run while the next unit's backward fills the other) */
} ZeroClass;

/* which buffer an index refers to */
enum { ZB_PARAMS = 0, ZB_GRADS, ZB_OPT /* master, m, v */ };

/* Where the optimizer states (fp32 master, Adam m, v) of stages 1-3 live
   (--offload-optimizer): in the backend's memory (none), in page-locked host
   memory with AdamW on the CPU (host: ZeRO-Offload, the CUDA build), or in a
   scratch file per rank streamed unit by unit (disk: ZeRO-Infinity's NVMe
   tier). Stage 0 replicates the optimizer on every rank and is refused. */
enum { OFFLOAD_NONE = 0, OFFLOAD_HOST, OFFLOAD_DISK };

typedef struct {
    int zero_stage;           /* 0..3 */
    int num_ranks, rank;      /* N, r: ranks sharing the shards (the shard group; all ranks unless HSDP) */
    int replicas;             /* R: groups holding the same shards (HSDP; 1 otherwise); units
                                 are padded for N*R ranks so a shard splits into R parts */
    int param_bytes;          /* p: 4 (fp32) or 2 (bf16) */
    int grad_bytes;           /* g */
    int master_bytes;         /* 4 when p < 4 (fp32 master copy), else 0 */
    int reshard_after_forward;/* stage 3: 1 = free each block after forward */
    int prefetch;             /* stage 3: blocks gathered ahead of use */
    int grad_accum_steps;     /* A: micro-steps per optimizer step */
    int num_units;
    ZeroUnit* units;
    int num_tensors;
    ZeroTensor* tensors;
    size_t num_parameters;    /* Psi: sum of tensor sizes (unpadded) */
    size_t padded_parameters; /* sum of units' padded sizes: a FULL buffer */
    size_t shard_parameters;  /* padded_parameters / N: a SHARDED buffer */
    size_t max_block_padded;  /* largest padded block unit (units 1..) */
    size_t max_padded;        /* largest padded unit (any) */
    size_t max_shard;         /* largest per-unit shard */
    int rs_scratch;           /* 1: the backend's reduce-scatter needs a receive area of one
                                 full unit (the CPU's host collectives) */
    int num_slots;            /* stage 3: gathered unit buffers, all classes */
    int num_classes;
    ZeroClass classes[ZERO_MAX_CLASSES];
    int overlap;              /* 1: two unit-grad buffers per class (reduce-scatter overlaps backward) */
    unsigned long long emb_gather_bytes; /* per micro-step, handed to the embedding-row all-gather (model) */
    int eval_only;            /* 1: no training: grads and optimizer states are held by no rank (ZeroSpec) */
    int offload;              /* OFFLOAD_NONE, _HOST or _DISK: where master, m, v live (stages 1-3) */
    int offload_staging;      /* 1: the backend cannot run AdamW on host memory (CUDA): each unit's grad
                                 shard goes to a host buffer, the updated param shard comes back */
    size_t quant_block;       /* stage 3 on N > 1 ranks, qwZ: elements per scale of the quantized weight
                                 all-gather (llmc/quant.h); 0 off */
    size_t max_qrecord;       /* the largest unit's record (bytes) */
    int secondary;            /* hpZ: K, the ranks sharing a secondary shard (consecutive in the group,
                                 one node); 1 off. A unit gathered more than once per optimizer step
                                 keeps padded/K elements of its first gather; later gathers in the step
                                 all-gather those among the K ranks only */
    size_t secondary_elements;/* the secondary shard buffer: sum over such units of padded / K */
    int quant_grads_bits;     /* stage 3 on N > 1 ranks, qgZ: 8 or 4; 0 off */
    size_t quant_grads_block;
    int qg_local;             /* qgZ: L ranks per node (the first hop); M = N / L nodes (the second) */
    size_t max_qg_scratch;    /* qgZ: bytes of the largest unit's records and partial sums (zero_qg_scratch_bytes) */
    int invariant;            /* --invariant 1 (docs/design.md section 13) */
} ZeroPlan;
#define ZERO_NO_SECONDARY ((size_t)-1)

static inline void zero_plan_free(ZeroPlan* P) {
    free(P->units); free(P->tensors);
    P->units = NULL; P->tensors = NULL;
}

/* The gathering mode and uses of one unit class (see ZeroClass). */
typedef struct {
    const char* name;
    int mode;            /* ZERO_KEEP_STEP, ZERO_KEEP_MICRO or ZERO_RESHARD */
    int uses;            /* gathers per micro-step of each unit when ZERO_RESHARD */
} ZeroClassSpec;

/* Every input of the plan. The model fills it (GPT-2: gpt2_plan_init in
   llmc/gpt_shard.h); zero_plan_init builds the plan from it alone. */
typedef struct {
    const ZeroTensor* tensors; /* num_tensors entries, grouped by unit (units non-decreasing); copied */
    int num_tensors;
    int num_units;
    int zero_stage;            /* 0..3 */
    int num_ranks, rank;       /* N, r: the shard group (all ranks unless HSDP) and this rank in it */
    int replicas;              /* R: groups holding the same shards (HSDP; 1 otherwise) */
    int param_bytes;           /* p: 4 (fp32) or 2 (bf16) */
    int grad_bytes;            /* g */
    int reshard_after_forward; /* stage 3: 1 = free each block after forward (the default classes' blocks) */
    int prefetch;              /* stage 3: units gathered ahead of use, >= 0 */
    int grad_accum_steps;      /* A: micro-steps per optimizer step, >= 1 */
    int num_classes;           /* 0: the default classes (unit 0 "root" kept for the step, the rest
                                  "blocks" per reshard_after_forward); else 1..ZERO_MAX_CLASSES */
    const int* unit_class;     /* num_classes > 0: the class of every unit (num_units entries) */
    ZeroClassSpec classes[ZERO_MAX_CLASSES];
    int overlap;               /* 1: two unit-grad buffers per class with more than one unit */
    int rs_scratch;            /* 1: the backend's reduce-scatter receives into one full unit (CPU) */
    int offload;               /* OFFLOAD_NONE, _HOST or _DISK: where master, m, v live (stages 1-3) */
    int offload_staging;       /* 1: the backend cannot run AdamW on host memory (CUDA) */
    unsigned long long emb_gather_bytes; /* per micro-step, handed to the model's embedding-row all-gather */
    size_t quant_weights_block; /* stage 3, qwZ: the weight all-gather in int8 blocks of this many elements
                                   (one fp32 scale each, llmc/quant.h); 0 off */
    int secondary;             /* stage 3, hpZ: K ranks (one node) share a secondary shard; 0 or 1 off */
    int quant_grads_bits;      /* stage 3, qgZ: the grad reduce-scatter in int8 (8) or int4 (4) blocks; 0 off */
    size_t quant_grads_block;  /* qgZ: elements per fp32 scale */
    int quant_grads_local;     /* qgZ: L, ranks per node (consecutive): the first hop inside the node, the
                                  second across nodes; 1 or the group size: a single hop */
    int invariant;             /* --invariant 1: pairwise cross-rank sums, the fixed-point grad norm (5 scalars) */
    int eval_only;             /* 1: no training (-x 0: evaluate and sample): the plan holds the params
                                  only, no grads, master weights, m, v, unit grads or offload */
} ZeroSpec;

/* (zero_plan_init) Assign every unit to a class (unit_class[u] in
   0..ncls-1, every class non-empty) with its gathering mode and uses per
   micro-step, and lay out the stage-3 slots: a ZERO_RESHARD class gets 1 +
   prefetch slots (capped at its unit count), the keeping modes one slot per
   unit. Units of a class get consecutive indices in unit order. Returns 0,
   or 1 with a message (the plan is then freed). */
static inline int zero_plan_set_classes(ZeroPlan* P, int ncls, const int* unit_class, const ZeroClassSpec* cs,
                                        char* err, size_t errlen) {
    if (ncls < 1 || ncls > ZERO_MAX_CLASSES) { zero_plan_free(P); return set_err(err, errlen, "shard plan: %d unit classes (1..%d)", ncls, ZERO_MAX_CLASSES); }
    memset(P->classes, 0, sizeof(P->classes));
    P->num_classes = ncls;
    for (int c = 0; c < ncls; c++) {
        P->classes[c].name = cs[c].name; P->classes[c].mode = cs[c].mode; P->classes[c].uses = cs[c].uses;
    }
    for (int u = 0; u < P->num_units; u++) {
        int c = unit_class[u];
        if (c < 0 || c >= ncls) { zero_plan_free(P); return set_err(err, errlen, "shard plan: unit %d in class %d of %d", u, c, ncls); }
        ZeroClass* K = &P->classes[c];
        P->units[u].cls = c;
        P->units[u].idx = K->num_units++;
        if (P->units[u].padded > K->max_padded) K->max_padded = P->units[u].padded;
        K->total_padded += P->units[u].padded;
    }
    P->num_slots = 0;
    for (int c = 0; c < ncls; c++) {
        ZeroClass* K = &P->classes[c];
        if (K->num_units == 0) { zero_plan_free(P); return set_err(err, errlen, "shard plan: unit class %d is empty", c); }
        K->grad_buffers = (P->overlap && K->num_units > 1) ? 2 : 1;
        K->first_slot = P->num_slots;
        K->num_slots = 0;
        if (P->zero_stage == 3)
            K->num_slots = K->mode == ZERO_RESHARD ? (1 + P->prefetch < K->num_units ? 1 + P->prefetch : K->num_units) : K->num_units;
        P->num_slots += K->num_slots;
    }
    if (P->num_slots > ZERO_MAX_SLOTS) { zero_plan_free(P); return set_err(err, errlen, "shard plan: %d gathered slots exceed %d", P->num_slots, ZERO_MAX_SLOTS); }
    return 0;
}

/* All-gathers of each unit of class c per optimizer step at stage 3 (its
   mode: once per step, once per micro-step, or before each of its uses). */
static inline unsigned long long zero_class_gathers(const ZeroPlan* P, int c) {
    const ZeroClass* K = &P->classes[c];
    unsigned long long A = (unsigned long long)P->grad_accum_steps;
    return K->mode == ZERO_KEEP_STEP ? 1 : K->mode == ZERO_KEEP_MICRO ? A : A * (unsigned long long)K->uses;
}

/* qwZ: the block layout (llmc/quant.h) of unit u: its tensors' offsets
   into seg (ZERO_MAX_UNIT_TENSORS entries), Q pointing at them. 1 when the
   unit has more tensors than that. */
#define ZERO_MAX_UNIT_TENSORS 64
static inline int zero_quant_layout(const ZeroPlan* P, int u, size_t block, int bits, size_t* seg, QuantLayout* Q) {
    const ZeroUnit* U = &P->units[u];
    if (U->num_tensors > ZERO_MAX_UNIT_TENSORS) return 1;
    for (int k = 0; k < U->num_tensors; k++) seg[k] = P->tensors[U->first_tensor + k].offset;
    Q->seg = seg; Q->nseg = U->num_tensors; Q->padded = U->padded; Q->shard = U->shard; Q->block = block; Q->bits = bits; Q->names = NULL;
    return 0;
}

/* qgZ: bytes the hierarchical quantized reduce-scatter of one unit needs
   (hostcoll_reduce_scatter_quantized): the N records this rank sends in the
   first hop and the N it receives, the fp32 partial sums of its M shards,
   the M records of each way of the second hop, and one shard of fp32. */
static inline size_t zero_qg_scratch_bytes(size_t grecord, size_t shard, int N, int L) {
    size_t M = (size_t)(N / L);
    return 2 * (size_t)N * grecord + 4 * M * shard + 2 * M * grecord + 4 * shard;
}

/* Bytes of the backend's comm scratch (the receive area of the host
   reduce-scatter and all-reduce: one full unit of grads; with qwZ also
   every rank's quantized record of the largest unit). */
static inline unsigned long long zero_comm_scratch_bytes(const ZeroPlan* P) {
    unsigned long long q = (unsigned long long)P->num_ranks * P->max_qrecord;
    if (P->eval_only) return q;   /* nothing is reduced: only qwZ's records */
    unsigned long long b = (unsigned long long)P->grad_bytes * P->max_padded;
    if (P->max_qg_scratch > q) q = P->max_qg_scratch;
    return q > b ? q : b;
}

/* The spec's values on their own (zero_plan_init's first step): 0, or 1
   with a message. */
static inline int zero_spec_check(const ZeroSpec* s, char* err, size_t errlen) {
    int n = s->num_tensors;
    if (s->zero_stage < 0 || s->zero_stage > 3) return set_err(err, errlen, "-z %d: zero_stage must be 0, 1, 2 or 3", s->zero_stage);
    if (s->num_ranks < 1 || s->rank < 0 || s->rank >= s->num_ranks) return set_err(err, errlen, "shard plan: rank %d of %d is invalid", s->rank, s->num_ranks);
    if (s->replicas < 1) return set_err(err, errlen, "shard plan: %d replicas is invalid", s->replicas);
    if (s->replicas > 1 && s->zero_stage == 0) return set_err(err, errlen, "--shard-group: stage 0 shards nothing; HSDP (shard groups smaller than the world) needs -z 1, 2 or 3");
    if (s->param_bytes != 2 && s->param_bytes != 4) return set_err(err, errlen, "shard plan: param_bytes %d must be 2 or 4", s->param_bytes);
    if (s->grad_bytes != 2 && s->grad_bytes != 4) return set_err(err, errlen, "shard plan: grad_bytes %d must be 2 or 4", s->grad_bytes);
    if (n < 1 || n > ZERO_MAX_TENSORS || s->num_units < 1) return set_err(err, errlen, "shard plan: %d tensors in %d units is invalid", n, s->num_units);
    if (s->prefetch < 0) return set_err(err, errlen, "--prefetch %d: must be >= 0", s->prefetch);
    if (s->grad_accum_steps < 1) return set_err(err, errlen, "shard plan: grad_accum_steps %d must be >= 1", s->grad_accum_steps);
    for (int i = 0, prev = 0; i < n; i++) {
        if (s->tensors[i].unit < prev || s->tensors[i].unit >= s->num_units) return set_err(err, errlen, "shard plan: tensor %s in unit %d is out of order", s->tensors[i].name, s->tensors[i].unit);
        if (s->tensors[i].size == 0) return set_err(err, errlen, "shard plan: tensor %s has size 0", s->tensors[i].name);
        prev = s->tensors[i].unit;
    }
    return 0;
}

/* The unit-major layout (zero_plan_init's second step): each tensor at a
   ZERO_ALIGN offset of its unit, each unit padded to the granule and split
   into num_ranks shards, the FULL and SHARDED offsets, the maxima. */
static inline void zero_plan_layout(ZeroPlan* P, const ZeroSpec* s) {
    int n = s->num_tensors, num_units = s->num_units;
    P->num_units = num_units; P->num_tensors = n;
    P->units = (ZeroUnit*)calloc_or_die((size_t)num_units, sizeof(ZeroUnit), "shard plan units");
    P->tensors = (ZeroTensor*)calloc_or_die((size_t)n, sizeof(ZeroTensor), "shard plan tensors");
    memcpy(P->tensors, s->tensors, (size_t)n * sizeof(ZeroTensor));
    for (int i = 0; i < n; i++) {
        ZeroTensor* t = &P->tensors[i];
        ZeroUnit* u = &P->units[t->unit];
        if (u->num_tensors++ == 0) u->first_tensor = i;
        t->offset = u->size;
        u->size = round_up(t->offset + t->size, ZERO_ALIGN);
        P->num_parameters += t->size;
    }
    size_t granule = zero_granule(P->num_ranks, P->replicas);
    size_t off = 0, soff = 0;
    for (int u = 0; u < num_units; u++) {
        ZeroUnit* U = &P->units[u];
        U->padded = round_up(U->size > 0 ? U->size : 1, granule);
        U->shard = U->padded / (size_t)P->num_ranks;
        U->offset = off; U->shard_offset = soff;
        off += U->padded; soff += U->shard;
        if (u > 0 && U->padded > P->max_block_padded) P->max_block_padded = U->padded;
        if (U->shard > P->max_shard) P->max_shard = U->shard;
        if (U->padded > P->max_padded) P->max_padded = U->padded;
    }
    P->padded_parameters = off;
    P->shard_parameters = soff;
}

/* ZeRO++'s quantized collectives at stage 3 (zero_plan_init's third step):
   every unit's blocks and record bytes for qwZ and qgZ, qgZ's scratch; the
   hpZ group size checked. 0, or 1 with a message (the plan freed). */
static inline int zero_plan_quant(ZeroPlan* P, const ZeroSpec* s, char* err, size_t errlen) {
    int num_units = P->num_units, num_ranks = P->num_ranks;
    if (s->quant_weights_block > 0 && P->zero_stage == 3 && num_ranks > 1) {
        P->quant_block = s->quant_weights_block;
        for (int u = 0; u < num_units; u++) {
            ZeroUnit* U = &P->units[u];
            size_t seg[ZERO_MAX_UNIT_TENSORS];
            QuantLayout Q;
            if (zero_quant_layout(P, u, P->quant_block, 8, seg, &Q)) { zero_plan_free(P); return set_err(err, errlen, "shard plan: unit %d has over %d tensors (qwZ)", u, ZERO_MAX_UNIT_TENSORS); }
            U->qblocks = quant_max_blocks(&Q, num_ranks);
            U->qrecord = quant_record_bytes(U->qblocks, U->shard, 8);
            if (U->qrecord > P->max_qrecord) P->max_qrecord = U->qrecord;
        }
    }
    if (s->quant_grads_bits && P->zero_stage == 3 && num_ranks > 1) {
        int L = s->quant_grads_local;
        if (s->quant_grads_bits != 8 && s->quant_grads_bits != 4) { zero_plan_free(P); return set_err(err, errlen, "shard plan: qgZ bits %d must be 8 or 4", s->quant_grads_bits); }
        if (s->quant_grads_block < 1) { zero_plan_free(P); return set_err(err, errlen, "shard plan: qgZ block %zu must be >= 1", s->quant_grads_block); }
        if (L < 1 || num_ranks % L) { zero_plan_free(P); return set_err(err, errlen, "qgZ: %d ranks per node must divide the %d ranks of the shard group", L, num_ranks); }
        P->quant_grads_bits = s->quant_grads_bits; P->quant_grads_block = s->quant_grads_block; P->qg_local = L;
        for (int u = 0; u < num_units; u++) {
            ZeroUnit* U = &P->units[u];
            size_t seg[ZERO_MAX_UNIT_TENSORS];
            QuantLayout Q;
            if (zero_quant_layout(P, u, P->quant_grads_block, P->quant_grads_bits, seg, &Q)) { zero_plan_free(P); return set_err(err, errlen, "shard plan: unit %d has over %d tensors (qgZ)", u, ZERO_MAX_UNIT_TENSORS); }
            U->gblocks = quant_max_blocks(&Q, num_ranks);
            U->grecord = quant_record_bytes(U->gblocks, U->shard, P->quant_grads_bits);
            size_t b = zero_qg_scratch_bytes(U->grecord, U->shard, num_ranks, L);
            if (b > P->max_qg_scratch) P->max_qg_scratch = b;
        }
    }
    P->secondary = 1;
    if (s->secondary > 1 && P->zero_stage == 3) {   /* (hpZ, qwZ and qgZ apply at stage 3 only; the trainer refuses them elsewhere) */
        if (num_ranks % s->secondary || s->secondary >= num_ranks) {
            zero_plan_free(P);
            return set_err(err, errlen, "--secondary-shard %d: must divide the %d ranks of the shard group and be fewer (a secondary group of all of them is the primary one)", s->secondary, num_ranks);
        }
    }
    return 0;
}

/* Build the plan from the spec: validate it, copy the tensors, lay out
   units and shards, assign the unit classes and their stage-3 slots.
   Returns 0, or 1 with a message in err for an impossible configuration
   (stage outside 0..3, N < 1, rank out of range, R < 1, HSDP at stage 0,
   element bytes other than 2 or 4, prefetch < 0, A < 1, no tensors, a
   tensor of size 0, units out of order, bad classes); P is then freed. */
static inline int zero_plan_init(ZeroPlan* P, const ZeroSpec* s, char* err, size_t errlen) {
    memset(P, 0, sizeof(*P));
    if (zero_spec_check(s, err, errlen)) return 1;
    P->zero_stage = s->zero_stage; P->num_ranks = s->num_ranks; P->rank = s->rank; P->replicas = s->replicas;
    P->param_bytes = s->param_bytes; P->grad_bytes = s->grad_bytes;
    P->master_bytes = s->param_bytes < 4 ? 4 : 0;
    P->reshard_after_forward = s->reshard_after_forward ? 1 : 0;
    P->prefetch = s->prefetch; P->grad_accum_steps = s->grad_accum_steps;
    P->overlap = s->overlap;
    P->rs_scratch = s->rs_scratch;
    P->eval_only = s->eval_only ? 1 : 0;
    P->invariant = s->invariant ? 1 : 0;
    P->offload = P->eval_only ? OFFLOAD_NONE : s->offload;   /* no optimizer states to offload */
    P->offload_staging = P->eval_only ? 0 : s->offload_staging;
    P->emb_gather_bytes = s->emb_gather_bytes;
    zero_plan_layout(P, s);
    if (zero_plan_quant(P, s, err, errlen)) return 1;
    int rc, num_units = P->num_units;
    if (s->num_classes > 0) {
        if (!s->unit_class) { zero_plan_free(P); return set_err(err, errlen, "shard plan: %d unit classes but no unit_class list", s->num_classes); }
        rc = zero_plan_set_classes(P, s->num_classes, s->unit_class, s->classes, err, errlen);
    } else {
        /* default classes: unit 0 = the root (kept for the step), the rest =
           blocks (gathered for forward and again for backward) */
        ZeroClassSpec cs[2] = {{"root", ZERO_KEEP_STEP, 1}, {"blocks", P->reshard_after_forward ? ZERO_RESHARD : ZERO_KEEP_MICRO, 2}};
        int* uc = (int*)malloc_or_die((size_t)num_units * sizeof(int), "unit classes");
        for (int u = 0; u < num_units; u++) uc[u] = u == 0 ? 0 : 1;
        rc = zero_plan_set_classes(P, num_units > 1 ? 2 : 1, uc, cs, err, errlen);
        free(uc);
    }
    if (rc) return rc;
    /* hpZ: the units gathered more than once per optimizer step */
    for (int u = 0; u < num_units; u++) P->units[u].sec_offset = ZERO_NO_SECONDARY;
    if (s->secondary > 1 && P->zero_stage == 3) {
        P->secondary = s->secondary;
        for (int u = 0; u < num_units; u++) {
            ZeroUnit* U = &P->units[u];
            if (zero_class_gathers(P, U->cls) < 2) continue;
            U->sec_offset = P->secondary_elements;
            P->secondary_elements += U->padded / (size_t)s->secondary;
        }
    }
    return 0;
}

/* Is buffer kind b held FULL (1) or SHARDED (0) at this stage? */
static inline int zero_is_full(const ZeroPlan* P, int b) {
    if (b == ZB_PARAMS) return P->zero_stage < 3;
    if (b == ZB_GRADS) return P->zero_stage < 2;
    return P->zero_stage < 1;
}

/* Elements a rank holds of buffer kind b (an evaluation-only plan holds
   no grads and no optimizer states). */
static inline size_t zero_held_elements(const ZeroPlan* P, int b) {
    if (P->eval_only && b != ZB_PARAMS) return 0;
    return zero_is_full(P, b) ? P->padded_parameters : P->shard_parameters;
}

/* Range [lo, hi) of unit coordinates (0..padded) that this rank holds of
   buffer kind b: the whole unit when FULL, its own shard otherwise (empty
   for grads and optimizer states in an evaluation-only plan). */
static inline void zero_held_range(const ZeroPlan* P, int b, int u, size_t* lo, size_t* hi) {
    const ZeroUnit* U = &P->units[u];
    if (P->eval_only && b != ZB_PARAMS) { *lo = *hi = 0; return; }
    if (zero_is_full(P, b)) { *lo = 0; *hi = U->padded; }
    else { *lo = (size_t)P->rank * U->shard; *hi = *lo + U->shard; }
}

/* The own shard of unit u, in unit coordinates: [r*shard, (r+1)*shard). */
static inline void zero_own_range(const ZeroPlan* P, int u, size_t* lo, size_t* hi) {
    const ZeroUnit* U = &P->units[u];
    *lo = (size_t)P->rank * U->shard; *hi = *lo + U->shard;
}

/* Index into a buffer of kind b of the element at unit coordinate x of unit
   u. x must lie in zero_held_range(b, u). */
static inline size_t zero_index(const ZeroPlan* P, int b, int u, size_t x) {
    const ZeroUnit* U = &P->units[u];
    if (zero_is_full(P, b)) return U->offset + x;
    return U->shard_offset + (x - (size_t)P->rank * U->shard);
}

/* Intersection of tensor t with the unit-coordinate range [lo, hi);
   returns the count and sets *a..*a+count in unit coordinates. */
static inline size_t zero_tensor_overlap(const ZeroPlan* P, int t, size_t lo, size_t hi, size_t* a) {
    const ZeroTensor* T = &P->tensors[t];
    size_t s = T->offset > lo ? T->offset : lo;
    size_t e = T->offset + T->size < hi ? T->offset + T->size : hi;
    *a = s;
    return e > s ? e - s : 0;
}

/* The range of unit coordinates on which this rank runs AdamW: everything
   at stage 0 (replicated optimizer), the own shard at stages 1-3. */
static inline void zero_update_range(const ZeroPlan* P, int u, size_t* lo, size_t* hi) {
    zero_held_range(P, ZB_OPT, u, lo, hi);
}

/* Optimizer states offloaded (stages 1-3): number of fp32 arrays streamed
   per element (m, v and the master copy when p < 4). */
static inline int zero_offload_arrays(const ZeroPlan* P) { return 2 + (P->master_bytes ? 1 : 0); }

/* Elements of the largest unit range the optimizer updates on this rank
   (the largest own shard at stages 1-3; a whole padded unit at stage 0,
   which the trainer refuses to offload): what one streaming buffer holds
   per array. */
static inline size_t zero_offload_unit_max(const ZeroPlan* P) { return zero_is_full(P, ZB_OPT) ? P->max_padded : P->max_shard; }

/* Predicted traffic of one optimizer step (bytes handed per collective, per
   rank), for comparison with Comm's PHASE_TRAIN counters divided by steps. */
/* --invariant 1 with A > 1 micro-steps (A a power of two): the buffers of
   the micro-step tree, log2(A) + 1 (engine.h, ZeroInvTree); else 0. */
static inline int zero_inv_tree_buffers(const ZeroPlan* P) {
    if (!P->invariant || P->eval_only || P->grad_accum_steps < 2) return 0;
    int h = 0;
    while ((1 << h) < P->grad_accum_steps) h++;
    return h + 1;
}

static inline void zero_predict_traffic(const ZeroPlan* P, unsigned long long handed[COLL_NUM]) {
    unsigned long long p = (unsigned long long)P->param_bytes, g = (unsigned long long)P->grad_bytes;
    unsigned long long full = P->padded_parameters, A = (unsigned long long)P->grad_accum_steps;
    for (int k = 0; k < COLL_NUM; k++) handed[k] = 0;
    handed[COLL_SCALARS] = (P->invariant ? A + 4 : 2) * sizeof(double); /* loss and grad-norm squares (--invariant 1: one loss per micro-step, 4 exact integer parts) */
    /* HSDP: the own grad shard of every unit, all-reduced across the replicas once per step */
    if (P->replicas > 1) handed[COLL_ALL_REDUCE] = g * P->shard_parameters;
    if (P->num_ranks == 1) return;  /* nothing to communicate in the group; the engine skips the calls */
    handed[COLL_EMB_GATHER] = A * P->emb_gather_bytes;
    switch (P->zero_stage) {
        /* --invariant 1 with A > 1: stages 0-1 reduce every micro-step (engine.h, zero_inv_end_micro) */
        case 0: handed[COLL_REDUCE_SCATTER] = (zero_inv_tree_buffers(P) ? A : 1) * g * full; handed[COLL_ALL_GATHER] = g * full; break; /* all-reduce = RS + AG */
        case 1: handed[COLL_REDUCE_SCATTER] = (zero_inv_tree_buffers(P) ? A : 1) * g * full; handed[COLL_ALL_GATHER] = p * full; break;
        case 2: handed[COLL_REDUCE_SCATTER] = A * g * full; handed[COLL_ALL_GATHER] = p * full; break;
        default:
            if (P->quant_grads_bits) {   /* qgZ: per micro-step and unit, N records inside the node, M across */
                unsigned long long L = (unsigned long long)P->qg_local, M = (unsigned long long)P->num_ranks / L;
                for (int u = 0; u < P->num_units; u++) {
                    if (L > 1) handed[COLL_QG_INSIDE] += A * (unsigned long long)P->num_ranks * P->units[u].grecord;
                    if (M > 1) handed[COLL_QG_ACROSS] += A * M * P->units[u].grecord;
                }
            } else
                handed[COLL_REDUCE_SCATTER] = A * g * full;
            for (int c = 0; c < P->num_classes; c++) {
                const ZeroClass* K = &P->classes[c];
                unsigned long long times = zero_class_gathers(P, c), primary = times;
                if (P->secondary > 1 && times > 1) {   /* hpZ: the first from the primary shards, the rest inside the node */
                    primary = 1;
                    handed[COLL_SECONDARY_GATHER] += (times - 1) * p * K->total_padded;
                }
                if (!P->quant_block) { handed[COLL_ALL_GATHER] += primary * p * K->total_padded; continue; }
                /* qwZ: every rank's record (int8 values + fp32 scales) of each unit */
                for (int u = 0; u < P->num_units; u++)
                    if (P->units[u].cls == c) handed[COLL_ALL_GATHER] += primary * (unsigned long long)P->num_ranks * P->units[u].qrecord;
            }
            break;
    }
}

/* The ranks a collective kind runs over in this plan: the replica groups
   (HSDP's all-reduce), the secondary group (hpZ), the node and the nodes
   (qgZ's two hops), else the shard group. */
static inline int zero_coll_ranks(const ZeroPlan* P, int k) {
    if (k == COLL_ALL_REDUCE) return P->replicas;
    if (k == COLL_SECONDARY_GATHER) return P->secondary;
    if (k == COLL_QG_INSIDE) return P->qg_local > 0 ? P->qg_local : 1;
    if (k == COLL_QG_ACROSS) return P->qg_local > 0 ? P->num_ranks / P->qg_local : 1;
    return P->num_ranks;
}

/* Bytes moved between tiers per optimizer step by an offloaded optimizer,
   per rank (counted by the engine, zero_print_offload_traffic):
     OFFL_DISK_READ / OFFL_DISK_WRITE: the scratch file, every unit's own
       shard of master, m, v read once and written once:
       4 x zero_offload_arrays x (own shard elements), i.e. 12 Psi/N each
       way in mixed precision, 8 Psi/N in fp32 (no master copy);
     OFFL_TO_HOST / OFFL_TO_BACKEND: a staging backend (CUDA): the reduced
       grad shard to the host (g Psi/N; plus the param shard, p Psi/N, when
       there is no master copy to start from) and the updated param shard
       back (p Psi/N). */
enum { OFFL_DISK_READ = 0, OFFL_DISK_WRITE, OFFL_TO_HOST, OFFL_TO_BACKEND, OFFL_NUM };

static inline void zero_predict_offload_traffic(const ZeroPlan* P, unsigned long long out[OFFL_NUM]) {
    for (int k = 0; k < OFFL_NUM; k++) out[k] = 0;
    if (P->offload == OFFLOAD_NONE) return;
    unsigned long long own = (unsigned long long)zero_held_elements(P, ZB_OPT);
    if (P->offload == OFFLOAD_DISK)
        out[OFFL_DISK_READ] = out[OFFL_DISK_WRITE] = 4ULL * (unsigned long long)zero_offload_arrays(P) * own;
    if (P->offload_staging) {
        out[OFFL_TO_HOST] = (unsigned long long)P->grad_bytes * own + (P->master_bytes ? 0ULL : (unsigned long long)P->param_bytes * own);
        out[OFFL_TO_BACKEND] = (unsigned long long)P->param_bytes * own;
    }
}

/* Traffic of one optimizer step of a plan, in units of Psi (what the run's
   traffic table prints as "volume per optimizer step"): for every
   collective but the scalars, the ring wire bytes (traffic.h) of what
   zero_predict_traffic says is handed per step, divided by the element size
   (params for all-gathers, grads otherwise) and by (n-1)/n x Psi, n being the
   ranks it runs over (the shard group; the replica groups for the HSDP
   all-reduce), as zero_print_traffic divides the counted wire bytes. 0 when
   nothing crosses the wire. */
static inline double zero_plan_traffic_psi(const ZeroPlan* P) {
    unsigned long long h[COLL_NUM];
    zero_predict_traffic(P, h);
    if (P->num_parameters == 0) return 0.0;
    double total = 0.0;
    for (int k = 0; k < COLL_NUM; k++) {
        int n = zero_coll_ranks(P, k);
        if (k == COLL_SCALARS || n < 2) continue;
        double elem = k == COLL_ALL_GATHER || k == COLL_SECONDARY_GATHER ? P->param_bytes : P->grad_bytes;
        total += (double)ring_wire_bytes(k, h[k], n) / (elem * (double)P->num_parameters * (n - 1) / (double)n);
    }
    return total;
}

#endif /* LLMC_ZERO_PLAN_H */
