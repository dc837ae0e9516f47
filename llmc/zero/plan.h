/*
 zero/plan.h: the shard plan, the single source of truth of where every
 element lives. Built ONCE, by one call (zero_plan_init), from one struct
 that holds every input (ZeroSpec); nothing writes a plan field afterwards,
 and every other part (ledger, engine, optimizer, reports, the estimator's
 model-specific traffic) asks the plan.

 Layout (DESIGN.md section 1). Parameters form ONE flat buffer, unit-major;
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

#define ZERO_ALIGN 16         /* elements; tensor starts and shard sizes are multiples */
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
    int offload;              /* OFFLOAD_NONE, _HOST or _DISK: where master, m, v live (stages 1-3) */
    int offload_staging;      /* 1: the backend cannot run AdamW on host memory (CUDA): each unit's grad
                                 shard goes to a host buffer, the updated param shard comes back */
} ZeroPlan;

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

/* Build the plan from the spec: validate it, copy the tensors, lay out
   units and shards, assign the unit classes and their stage-3 slots.
   Returns 0, or 1 with a message in err for an impossible configuration
   (stage outside 0..3, N < 1, rank out of range, R < 1, HSDP at stage 0,
   element bytes other than 2 or 4, prefetch < 0, A < 1, no tensors, a
   tensor of size 0, units out of order, bad classes); P is then freed. */
static inline int zero_plan_init(ZeroPlan* P, const ZeroSpec* s, char* err, size_t errlen) {
    memset(P, 0, sizeof(*P));
    const ZeroTensor* tensors = s->tensors;
    int n = s->num_tensors, num_units = s->num_units, zero_stage = s->zero_stage;
    int num_ranks = s->num_ranks, rank = s->rank, replicas = s->replicas;
    int param_bytes = s->param_bytes, grad_bytes = s->grad_bytes, prefetch = s->prefetch, grad_accum_steps = s->grad_accum_steps;
    if (zero_stage < 0 || zero_stage > 3) return set_err(err, errlen, "-z %d: zero_stage must be 0, 1, 2 or 3", zero_stage);
    if (num_ranks < 1 || rank < 0 || rank >= num_ranks) return set_err(err, errlen, "shard plan: rank %d of %d is invalid", rank, num_ranks);
    if (replicas < 1) return set_err(err, errlen, "shard plan: %d replicas is invalid", replicas);
    if (replicas > 1 && zero_stage == 0) return set_err(err, errlen, "--shard-group: stage 0 shards nothing; HSDP (shard groups smaller than the world) needs -z 1, 2 or 3");
    if (param_bytes != 2 && param_bytes != 4) return set_err(err, errlen, "shard plan: param_bytes %d must be 2 or 4", param_bytes);
    if (grad_bytes != 2 && grad_bytes != 4) return set_err(err, errlen, "shard plan: grad_bytes %d must be 2 or 4", grad_bytes);
    if (n < 1 || n > ZERO_MAX_TENSORS || num_units < 1) return set_err(err, errlen, "shard plan: %d tensors in %d units is invalid", n, num_units);
    if (prefetch < 0) return set_err(err, errlen, "--prefetch %d: must be >= 0", prefetch);
    if (grad_accum_steps < 1) return set_err(err, errlen, "shard plan: grad_accum_steps %d must be >= 1", grad_accum_steps);
    for (int i = 0, prev = 0; i < n; i++) {
        if (tensors[i].unit < prev || tensors[i].unit >= num_units) return set_err(err, errlen, "shard plan: tensor %s in unit %d is out of order", tensors[i].name, tensors[i].unit);
        if (tensors[i].size == 0) return set_err(err, errlen, "shard plan: tensor %s has size 0", tensors[i].name);
        prev = tensors[i].unit;
    }
    P->zero_stage = zero_stage; P->num_ranks = num_ranks; P->rank = rank; P->replicas = replicas;
    P->param_bytes = param_bytes; P->grad_bytes = grad_bytes;
    P->master_bytes = param_bytes < 4 ? 4 : 0;
    P->reshard_after_forward = s->reshard_after_forward ? 1 : 0;
    P->prefetch = prefetch; P->grad_accum_steps = grad_accum_steps;
    P->overlap = s->overlap;
    P->rs_scratch = s->rs_scratch;
    P->offload = s->offload;
    P->offload_staging = s->offload_staging;
    P->emb_gather_bytes = s->emb_gather_bytes;
    P->num_units = num_units; P->num_tensors = n;
    P->units = (ZeroUnit*)calloc_or_die((size_t)num_units, sizeof(ZeroUnit), "shard plan units");
    P->tensors = (ZeroTensor*)calloc_or_die((size_t)n, sizeof(ZeroTensor), "shard plan tensors");
    memcpy(P->tensors, tensors, (size_t)n * sizeof(ZeroTensor));
    for (int i = 0; i < n; i++) {
        ZeroTensor* t = &P->tensors[i];
        ZeroUnit* u = &P->units[t->unit];
        t->offset = u->size;
        u->size = round_up(t->offset + t->size, ZERO_ALIGN);
        P->num_parameters += t->size;
    }
    size_t granule = zero_granule(num_ranks, replicas);
    size_t off = 0, soff = 0;
    for (int u = 0; u < num_units; u++) {
        ZeroUnit* U = &P->units[u];
        U->padded = round_up(U->size > 0 ? U->size : 1, granule);
        U->shard = U->padded / (size_t)num_ranks;
        U->offset = off; U->shard_offset = soff;
        off += U->padded; soff += U->shard;
        if (u > 0 && U->padded > P->max_block_padded) P->max_block_padded = U->padded;
        if (U->shard > P->max_shard) P->max_shard = U->shard;
        if (U->padded > P->max_padded) P->max_padded = U->padded;
    }
    P->padded_parameters = off;
    P->shard_parameters = soff;
    if (s->num_classes > 0) {
        if (!s->unit_class) { zero_plan_free(P); return set_err(err, errlen, "shard plan: %d unit classes but no unit_class list", s->num_classes); }
        return zero_plan_set_classes(P, s->num_classes, s->unit_class, s->classes, err, errlen);
    }
    /* default classes: unit 0 = the root (kept for the step), the rest =
       blocks (gathered for forward and again for backward) */
    ZeroClassSpec cs[2] = {{"root", ZERO_KEEP_STEP, 1}, {"blocks", P->reshard_after_forward ? ZERO_RESHARD : ZERO_KEEP_MICRO, 2}};
    int* uc = (int*)malloc_or_die((size_t)num_units * sizeof(int), "unit classes");
    for (int u = 0; u < num_units; u++) uc[u] = u == 0 ? 0 : 1;
    int rc = zero_plan_set_classes(P, num_units > 1 ? 2 : 1, uc, cs, err, errlen);
    free(uc);
    return rc;
}

/* Is buffer kind b held FULL (1) or SHARDED (0) at this stage? */
static inline int zero_is_full(const ZeroPlan* P, int b) {
    if (b == ZB_PARAMS) return P->zero_stage < 3;
    if (b == ZB_GRADS) return P->zero_stage < 2;
    return P->zero_stage < 1;
}

/* Elements a rank holds of buffer kind b. */
static inline size_t zero_held_elements(const ZeroPlan* P, int b) {
    return zero_is_full(P, b) ? P->padded_parameters : P->shard_parameters;
}

/* Range [lo, hi) of unit coordinates (0..padded) that this rank holds of
   buffer kind b: the whole unit when FULL, its own shard otherwise. */
static inline void zero_held_range(const ZeroPlan* P, int b, int u, size_t* lo, size_t* hi) {
    const ZeroUnit* U = &P->units[u];
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
static inline void zero_predict_traffic(const ZeroPlan* P, unsigned long long handed[COLL_NUM]) {
    unsigned long long p = (unsigned long long)P->param_bytes, g = (unsigned long long)P->grad_bytes;
    unsigned long long full = P->padded_parameters, A = (unsigned long long)P->grad_accum_steps;
    for (int k = 0; k < COLL_NUM; k++) handed[k] = 0;
    handed[COLL_SCALARS] = 2 * sizeof(double); /* loss and grad-norm squares */
    /* HSDP: the own grad shard of every unit, all-reduced across the replicas once per step */
    if (P->replicas > 1) handed[COLL_ALL_REDUCE] = g * P->shard_parameters;
    if (P->num_ranks == 1) return;  /* nothing to communicate in the group; the engine skips the calls */
    handed[COLL_EMB_GATHER] = A * P->emb_gather_bytes;
    switch (P->zero_stage) {
        case 0: handed[COLL_REDUCE_SCATTER] = g * full; handed[COLL_ALL_GATHER] = g * full; break; /* all-reduce = RS + AG */
        case 1: handed[COLL_REDUCE_SCATTER] = g * full; handed[COLL_ALL_GATHER] = p * full; break;
        case 2: handed[COLL_REDUCE_SCATTER] = A * g * full; handed[COLL_ALL_GATHER] = p * full; break;
        default:
            handed[COLL_REDUCE_SCATTER] = A * g * full;
            for (int c = 0; c < P->num_classes; c++) {
                const ZeroClass* K = &P->classes[c];
                unsigned long long times = K->mode == ZERO_KEEP_STEP ? 1 : K->mode == ZERO_KEEP_MICRO ? A : A * (unsigned long long)K->uses;
                handed[COLL_ALL_GATHER] += times * p * K->total_padded;
            }
            break;
    }
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
        int n = k == COLL_ALL_REDUCE ? P->replicas : P->num_ranks;
        if (k == COLL_SCALARS || n < 2) continue;
        double elem = k == COLL_ALL_GATHER ? P->param_bytes : P->grad_bytes;
        total += (double)ring_wire_bytes(k, h[k], n) / (elem * (double)P->num_parameters * (n - 1) / (double)n);
    }
    return total;
}

#endif /* LLMC_ZERO_PLAN_H */
