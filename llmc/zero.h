/*
 zero.h: where every byte lives. The shard plan of ZeRO stages 0-3, the
 memory ledger, the closed-form estimator of the ZeRO paper, and (unless
 ZERO_PLAN_ONLY is defined) the engine that executes the plan with the
 backend's buffers and collectives.

 Source: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 Trillion Parameter Models", arXiv:1910.02054, sections 5 and 7; FSDP
 (Zhao et al., arXiv:2304.11277) for units and reshard_after_forward.

 Layout (DESIGN.md section 1). Parameters form ONE flat buffer, unit-major:
 unit 0 is the root (wte, wpe, lnf_w, lnf_b), unit l+1 is transformer block l.
 Inside a unit every tensor starts at a multiple of ZERO_ALIGN elements; the
 unit is then padded to a multiple of N * ZERO_ALIGN elements (N = ranks in
 the shard group) and split into N equal contiguous shards; rank r owns shard
 r of every unit. Gradients, fp32 master weights and Adam m, v use the same
 coordinates. A buffer is held either FULL (all units, padded) or SHARDED
 (only the own shard of every unit, concatenated):

   stage | params  grads   master/m/v     (p, g = bytes per param / grad elem,
   0     | full    full    full            k = optimizer bytes per param:
   1     | full    full    shard           8 for m+v, +4 for an fp32 master
   2     | full    shard   shard           copy when p < 4)
   3     | shard   shard   shard

 Per-rank model-state bytes (the paper's formulas, Psi = num_parameters):
   stage 0: (p+g+k) Psi;  1: (p+g) Psi + k Psi/N;  2: p Psi + (g+k) Psi/N;
   stage 3: (p+g+k) Psi/N.  The plan computes them on the padded sizes, so the
   ledger can match them to the byte; the formula values are printed beside.

 Traffic per optimizer step with A micro-steps (bytes handed to collectives):
   stage 0: all-reduce grads = reduce-scatter g Psi + all-gather g Psi
            (deterministic: the same sums as stages 1-3; "2 Psi")
   stage 1: reduce-scatter grads g Psi + all-gather params p Psi ("2 Psi")
   stage 2: reduce-scatter every micro-step A g Psi + all-gather p Psi
   stage 3: all-gather each block before forward and again before backward
            (2 A p Psi_blocks, A p Psi_blocks with reshard_after_forward=0),
            the root once per step (p Psi_root), reduce-scatter A g Psi ("3 Psi")

 Optimizer offload (stages 1-3, --offload-optimizer; ZeRO-Offload,
 Ren et al. 2021, arXiv:2101.06840; ZeRO-Infinity, arXiv:2104.07857): the
 k Psi/N bytes of master, m, v move to page-locked host memory (host) or to
 a scratch file per rank (disk, llmc/offload.h), streamed unit by unit
 through two buffers by zero_offload_adamw; the ledger then has a host and
 a disk tier, and each step moves 2 k Psi/N bytes to and from the disk (or
 g Psi/N grads down and p Psi/N params up over PCIe for host). The same
 adamw_update on the same elements: bitwise the same numbers.
*/
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "traffic.h"

#define ZERO_ALIGN 16         /* elements; tensor starts and shard sizes are multiples */
#define ZERO_MAX_TENSORS 65536
#define ZERO_MAX_SLOTS 1024

/* ------------------------------------------------------------------------ */
/* Shard plan                                                               */

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
                                 full unit (the CPU's host collectives); set by the caller */
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

/* Assign every unit to a class (unit_class[u] in 0..ncls-1, every class
   non-empty) with its gathering mode and uses per micro-step, and lay out the
   stage-3 slots: a ZERO_RESHARD class gets 1 + prefetch slots (capped at its
   unit count), the keeping modes one slot per unit. Units of a class get
   consecutive indices in unit order. Returns 0, or 1 with a message (the
   plan is then freed). */
static inline int zero_plan_set_classes(ZeroPlan* P, int ncls, const int* unit_class, const int* mode, const int* uses,
                                        const char* const* names, char* err, size_t errlen) {
    if (ncls < 1 || ncls > ZERO_MAX_CLASSES) { zero_plan_free(P); return set_err(err, errlen, "shard plan: %d unit classes (1..%d)", ncls, ZERO_MAX_CLASSES); }
    memset(P->classes, 0, sizeof(P->classes));
    P->num_classes = ncls;
    for (int c = 0; c < ncls; c++) {
        P->classes[c].name = names[c]; P->classes[c].mode = mode[c]; P->classes[c].uses = uses[c];
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

/* Build the plan. tensors: n entries, grouped by unit (unit numbers
   non-decreasing), copied. num_ranks, rank: the shard group (N) and this
   rank in it; replicas: R groups holding the same shards (HSDP, 1 without).
   Returns 0, or 1 with a message in err for an impossible configuration
   (stage outside 0..3, N < 1, rank out of range, a tensor of size 0, units
   out of order). */
static inline int zero_plan_init(ZeroPlan* P, const ZeroTensor* tensors, int n, int num_units,
                                 int zero_stage, int num_ranks, int rank, int replicas, int param_bytes, int grad_bytes,
                                 int reshard_after_forward, int prefetch, int grad_accum_steps,
                                 char* err, size_t errlen) {
    memset(P, 0, sizeof(*P));
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
    P->reshard_after_forward = reshard_after_forward ? 1 : 0;
    P->prefetch = prefetch; P->grad_accum_steps = grad_accum_steps;
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
    size_t granule = (size_t)num_ranks * (size_t)replicas * ZERO_ALIGN;
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
    /* default classes: unit 0 = the root (kept for the step), the rest =
       blocks (gathered for forward and again for backward) */
    int cls[2] = {0, 1}, modes[2] = {ZERO_KEEP_STEP, P->reshard_after_forward ? ZERO_RESHARD : ZERO_KEEP_MICRO}, uses[2] = {1, 2};
    const char* names[2] = {"root", "blocks"};
    int* uc = (int*)malloc_or_die((size_t)num_units * sizeof(int), "unit classes");
    for (int u = 0; u < num_units; u++) uc[u] = u == 0 ? cls[0] : cls[1];
    int rc = zero_plan_set_classes(P, num_units > 1 ? 2 : 1, uc, modes, uses, names, err, errlen);
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

/* ------------------------------------------------------------------------ */
/* Ledger: every byte of model states and activations, by category          */

/* MEM_EMB_ROWS: every rank's rows of d(embedding output) and token ids,
   all-gathered (gpt.h); MEM_EMB_ACC: stages 0-1 with gradient accumulation,
   the embedding gradient of the own shard, summed over micro-steps until the
   step's reduce-scatter is done. */
/* MEM_OFFLOAD_BUF: --offload-optimizer disk, the two streaming buffers
   (one unit's shard of master, m, v each); MEM_OFFLOAD_STAGING: offload on
   a backend that cannot run AdamW on host memory (CUDA), one unit's grad
   shard and param shard in host memory. */
enum { MEM_PARAMS = 0, MEM_GRADS, MEM_MASTER, MEM_ADAM_M, MEM_ADAM_V, MEM_ACTIVATIONS,
       MEM_GATHERED, MEM_UNIT_GRADS, MEM_COMM_SCRATCH, MEM_EMB_ROWS, MEM_EMB_ACC,
       MEM_OFFLOAD_BUF, MEM_OFFLOAD_STAGING, MEM_NUM };
static const char* mem_names[MEM_NUM] = {"params", "grads", "master weights", "adam m", "adam v",
                                         "activations", "gathered units (transient)", "unit grads (transient)",
                                         "comm scratch", "gathered embedding rows", "embedding grad accumulator",
                                         "optimizer streaming buffers", "offload staging (grad, param)"};

typedef struct {
    unsigned long long predicted[MEM_NUM];
    unsigned long long allocated[MEM_NUM];
    unsigned long long current, peak;           /* all categories */
    unsigned long long gathered_in_use, gathered_peak; /* stage-3 gathered bytes actually holding a unit */
    int failed_category;                        /* first allocation that failed, -1 if none */
    unsigned long long failed_bytes;
    /* Tiers. predicted[] / allocated[] above are the backend's memory (the
       GPU's in the CUDA build, host memory in the CPU build). With the
       optimizer offloaded, categories also live in page-locked host memory
       (CUDA build) or on disk (the scratch file, zero_offload_open):
       allocated_disk is set when the file is created, and disk_file_bytes is
       its size as fstat(2) reports it, disk_reserved_bytes its allocated
       blocks (st_blocks * 512). */
    unsigned long long predicted_host[MEM_NUM], allocated_host[MEM_NUM];
    unsigned long long predicted_disk[MEM_NUM], allocated_disk[MEM_NUM];
    long long disk_file_bytes, disk_reserved_bytes;
    char disk_file[4096];
} Ledger;

/* Optimizer states offloaded (stages 1-3): number of fp32 arrays streamed
   per element (m, v and the master copy when p < 4). */
static inline int zero_offload_arrays(const ZeroPlan* P) { return 2 + (P->master_bytes ? 1 : 0); }

/* Elements of the largest unit range the optimizer updates on this rank
   (the largest own shard at stages 1-3; a whole padded unit at stage 0,
   which the trainer refuses to offload): what one streaming buffer holds
   per array. */
static inline size_t zero_offload_unit_max(const ZeroPlan* P) { return zero_is_full(P, ZB_OPT) ? P->max_padded : P->max_shard; }

/* The tiers of an offloaded optimizer (P->offload != OFFLOAD_NONE), from the
   plan alone: master, m and v (4 bytes x the own shard each, as without
   offload) move from the backend's memory to host memory (host) or to the
   scratch file (disk); disk adds the two streaming buffers of
   zero_offload_arrays x 4 x max_shard bytes each (the backend's memory on
   the CPU, host memory where staging is needed), and a staging backend the
   host buffers of one unit's grad shard and param shard ((g + p) x
   max_shard). Called by zero_predict_memory. */
static inline void zero_predict_offload_memory(const ZeroPlan* P, Ledger* L) {
    if (P->offload == OFFLOAD_NONE) return;
    int cats[3] = {MEM_MASTER, MEM_ADAM_M, MEM_ADAM_V};
    for (int i = 0; i < 3; i++) {
        unsigned long long b = L->predicted[cats[i]];
        L->predicted[cats[i]] = 0;
        if (P->offload == OFFLOAD_DISK) L->predicted_disk[cats[i]] = b;
        else L->predicted_host[cats[i]] = b;
    }
    unsigned long long ms = (unsigned long long)zero_offload_unit_max(P);
    if (P->offload == OFFLOAD_DISK) {
        unsigned long long buf = 2ULL * (unsigned long long)zero_offload_arrays(P) * 4ULL * ms;
        if (P->offload_staging) L->predicted_host[MEM_OFFLOAD_BUF] = buf;
        else L->predicted[MEM_OFFLOAD_BUF] = buf;
    }
    if (P->offload_staging)
        L->predicted_host[MEM_OFFLOAD_STAGING] = (unsigned long long)(P->grad_bytes + P->param_bytes) * ms;
}

/* Predicted per-rank bytes of every model-state category and of the
   transient buffers, from the plan alone. Activations are predicted by the
   model (gpt.h) and passed in. */
static inline void zero_predict_memory(const ZeroPlan* P, unsigned long long activation_bytes, Ledger* L) {
    memset(L, 0, sizeof(*L));
    L->failed_category = -1;
    unsigned long long p = (unsigned long long)P->param_bytes, g = (unsigned long long)P->grad_bytes;
    L->predicted[MEM_PARAMS] = p * zero_held_elements(P, ZB_PARAMS);
    L->predicted[MEM_GRADS] = g * zero_held_elements(P, ZB_GRADS);
    L->predicted[MEM_MASTER] = (unsigned long long)P->master_bytes * zero_held_elements(P, ZB_OPT);
    L->predicted[MEM_ADAM_M] = 4ULL * zero_held_elements(P, ZB_OPT);
    L->predicted[MEM_ADAM_V] = 4ULL * zero_held_elements(P, ZB_OPT);
    L->predicted[MEM_ACTIVATIONS] = activation_bytes;
    for (int c = 0; c < P->num_classes; c++) {
        const ZeroClass* K = &P->classes[c];
        if (P->zero_stage == 3) L->predicted[MEM_GATHERED] += p * (unsigned long long)K->num_slots * K->max_padded;
        if (P->zero_stage >= 2) L->predicted[MEM_UNIT_GRADS] += g * (unsigned long long)K->grad_buffers * K->max_padded;
    }
    /* Collectives run in place (the own shard of a full unit buffer receives
       the sum); a backend whose reduce-scatter is an all-to-all plus a sum in
       rank order (the CPU's, comm.h) receives into one unit-sized area. */
    if (P->rs_scratch && (P->num_ranks > 1 || P->replicas > 1)) L->predicted[MEM_COMM_SCRATCH] = g * P->max_padded;
    zero_predict_offload_memory(P, L);
}

/* Model-state bytes (params, grads, master, m, v) of a ledger column. */
static inline unsigned long long ledger_model_states(const unsigned long long* col) {
    return col[MEM_PARAMS] + col[MEM_GRADS] + col[MEM_MASTER] + col[MEM_ADAM_M] + col[MEM_ADAM_V];
}

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

/* ------------------------------------------------------------------------ */
/* Estimator: the closed forms, no padding, for any Psi and N               */

/* Per-rank model-state bytes of stage s: p, g bytes per param/grad, k
   optimizer bytes per param (12 for mixed-precision Adam, 8 for fp32). */
static inline double zero_formula_bytes(int stage, double psi, double N, double p, double g, double k) {
    switch (stage) {
        case 0: return (p + g + k) * psi;
        case 1: return (p + g) * psi + k * psi / N;
        case 2: return p * psi + (g + k) * psi / N;
        default: return (p + g + k) * psi / N;
    }
}

/* Traffic per step in units of Psi elements moved (ring volume, ZeRO paper
   section 7): 2 for stages 0-2, 3 for stage 3. */
static inline double zero_formula_traffic_psi(int stage) { return stage == 3 ? 3.0 : 2.0; }

/* Smallest N for which stage s fits in mem bytes, or 0 for "never".
   Exact integer arithmetic on bytes (psi integer, p,g,k integers). */
static inline unsigned long long zero_min_ranks(int stage, unsigned long long psi, unsigned long long p,
                                                unsigned long long g, unsigned long long k, unsigned long long mem) {
    unsigned long long rep, shard;   /* replicated and sharded bytes */
    switch (stage) {
        case 0: rep = (p + g + k) * psi; shard = 0; break;
        case 1: rep = (p + g) * psi; shard = k * psi; break;
        case 2: rep = p * psi; shard = (g + k) * psi; break;
        default: rep = 0; shard = (p + g + k) * psi; break;
    }
    if (shard == 0) return rep <= mem ? 1 : 0;
    if (rep >= mem) return 0;
    unsigned long long room = mem - rep;
    return (shard + room - 1) / room;
}

/* Offloaded optimizer (ZeRO-Offload / ZeRO-Infinity, stages 1-3): the
   optimizer states, k Psi/N per rank, leave the device, so the device keeps
   the stage's formula with k = 0: stage 1 (p+g) Psi, stage 2 p Psi + g Psi/N,
   stage 3 (p+g) Psi/N; the host or disk holds k Psi/N per rank; with disk
   every step reads and writes them once (2 k Psi/N). The smallest rank count
   whose DEVICE fits is zero_min_ranks with k = 0 (the host or disk capacity
   is not checked). */
static inline double zero_formula_offload_device_bytes(int stage, double psi, double N, double p, double g) {
    return zero_formula_bytes(stage, psi, N, p, g, 0.0);
}
static inline double zero_formula_offload_bytes(double psi, double N, double k) { return k * psi / N; }

static inline void zero_estimate_print_offload(FILE* out, double psi, int N, int p, int g, int k, double gpu_mem) {
    fprintf(out, "optimizer offloaded (--offload-optimizer host or disk:DIR, stages 1-3): master, m, v = k Psi/N = %d Psi/N per rank off the device\n", k);
    fprintf(out, "%-6s %-28s %14s %14s %14s %6s %10s\n", "stage", "per-rank device bytes", "GB per rank", "offloaded GB", "disk GB/step", "fits", "min ranks");
    static const char* forms[4] = {"", "(p+g) Psi", "p Psi + g Psi/N", "(p+g) Psi/N"};
    for (int s = 1; s < 4; s++) {
        double b = zero_formula_offload_device_bytes(s, psi, (double)N, p, g);
        double off = zero_formula_offload_bytes(psi, (double)N, k);
        char fits[8] = "-", minr[24] = "-", label[16];
        if (gpu_mem > 0) {
            snprintf(fits, sizeof(fits), "%s", b <= gpu_mem ? "yes" : "no");
            unsigned long long m = zero_min_ranks(s, (unsigned long long)(psi + 0.5), (unsigned long long)p,
                                                  (unsigned long long)g, 0ULL, (unsigned long long)(gpu_mem + 0.5));
            if (m == 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%llu", m);
        }
        snprintf(label, sizeof(label), "%d+off", s);
        fprintf(out, "%-6s %-28s %14.3f %14.3f %14.3f %6s %10s\n", label, forms[s], b / 1e9, off / 1e9, 2.0 * off / 1e9, fits, minr);
    }
}

/* Print the estimator table: per-rank GB (1e9 bytes) for stages 0-3, traffic
   per step in Psi, whether each fits in gpu_mem bytes (if > 0) and the
   smallest rank count that fits. */
static inline void zero_estimate_print(FILE* out, double psi, int N, int p, int g, int k, double gpu_mem) {
    fprintf(out, "ZeRO estimate: Psi = %.0f parameters (%.4g), N = %d ranks, %d+%d+%d = %d bytes/param", psi, psi, N, p, g, k, p + g + k);
    if (gpu_mem > 0) fprintf(out, ", device memory %.1f GB", gpu_mem / 1e9);
    fprintf(out, "\n");
    fprintf(out, "%-6s %-28s %14s %10s %6s %10s\n", "stage", "per-rank model states", "GB per rank", "traffic", "fits", "min ranks");
    static const char* forms[4] = {"(p+g+k) Psi", "(p+g) Psi + k Psi/N", "p Psi + (g+k) Psi/N", "(p+g+k) Psi/N"};
    for (int s = 0; s < 4; s++) {
        double b = zero_formula_bytes(s, psi, (double)N, p, g, k);
        char fits[8] = "-", minr[24] = "-";
        if (gpu_mem > 0) {
            snprintf(fits, sizeof(fits), "%s", b <= gpu_mem ? "yes" : "no");
            unsigned long long m = zero_min_ranks(s, (unsigned long long)(psi + 0.5), (unsigned long long)p,
                                                  (unsigned long long)g, (unsigned long long)k, (unsigned long long)(gpu_mem + 0.5));
            if (m == 0) snprintf(minr, sizeof(minr), "never");
            else snprintf(minr, sizeof(minr), "%llu", m);
        }
        fprintf(out, "%-6d %-28s %14.3f %8.1f Psi %6s %10s\n", s, forms[s], b / 1e9, zero_formula_traffic_psi(s), fits, minr);
    }
    zero_estimate_print_offload(out, psi, N, p, g, k, gpu_mem);
}


/* ------------------------------------------------------------------------ */
/* Engine: executes the plan. Needs floatX, the Comm, and the backend        */
/* functions (llmc/cpu/backend.h or llmc/cuda/backend.cuh) declared first.  */
#ifndef ZERO_PLAN_ONLY
#include "comm.h"
#include "trace.h"
#include "offload.h"

/* A backend whose AdamW cannot run on host memory (CUDA) defines
   BACKEND_OFFLOAD_STAGING 1 and backend_host_malloc / backend_host_free
   (page-locked host memory) and adamw_host_update (AdamW on the CPU, the
   same bits as its device kernel). On the CPU the backend's memory is host
   memory: AdamW runs on the offloaded arrays in place. */
#ifndef BACKEND_OFFLOAD_STAGING
#define BACKEND_OFFLOAD_STAGING 0
static inline void* backend_host_malloc(size_t bytes) { return backend_malloc(bytes); }
static inline void backend_host_free(void* p) { backend_free(p); }
#endif

/* Allocate through the ledger. A failed allocation returns NULL and is
   recorded (failed_category, failed_bytes) for the caller to report as one
   collective error (see gpt2_init); later allocations are skipped. */
static inline void* ledger_alloc(Ledger* L, Comm* c, int cat, size_t bytes) {
    (void)c;
    if (bytes == 0 || L->failed_category >= 0) return NULL;
    void* p = backend_malloc(bytes);
    if (!p) { L->failed_category = cat; L->failed_bytes = bytes; return NULL; }
    backend_memset_zero(p, bytes);
    L->allocated[cat] += bytes;
    L->current += bytes;
    if (L->current > L->peak) L->peak = L->current;
    return p;
}

static inline void ledger_free(Ledger* L, int cat, void* p, size_t bytes) {
    if (!p) return;
    backend_free(p);
    L->allocated[cat] -= bytes;
    L->current -= bytes;
}

/* The same in the host tier (page-locked host memory of a staging
   backend; only the offloaded optimizer uses it). Zeroed. */
static inline void* ledger_alloc_host(Ledger* L, int cat, size_t bytes) {
    if (bytes == 0 || L->failed_category >= 0) return NULL;
    void* p = backend_host_malloc(bytes);
    if (!p) { L->failed_category = cat; L->failed_bytes = bytes; return NULL; }
    memset(p, 0, bytes);
    L->allocated_host[cat] += bytes;
    return p;
}

static inline void ledger_free_host(Ledger* L, int cat, void* p, size_t bytes) {
    if (!p) return;
    backend_host_free(p);
    L->allocated_host[cat] -= bytes;
}

typedef struct {
    ZeroPlan* plan;
    Ledger* ledger;
    Comm* comm;
    floatX* params;       /* FULL (stages 0-2) or SHARDED (stage 3) */
    floatX* grads;        /* FULL (stages 0-1) or SHARDED (stages 2-3) */
    float* master;        /* fp32 master weights when p < 4, else NULL */
    float* adam_m;
    float* adam_v;
    /* stage 3: gathered unit buffers, the slots of every class (ZeroClass.first_slot ..) */
    floatX* slots[ZERO_MAX_SLOTS];
    int slot_unit[ZERO_MAX_SLOTS];                 /* which unit a slot holds, -1 = free */
    unsigned long long slot_fence[ZERO_MAX_SLOTS]; /* fence of the last all-gather into each slot */
    /* stages 2-3: unit-grad buffers, grad_buffers per class, used in turn */
    floatX* unit_grads[ZERO_MAX_CLASSES][2];
    unsigned long long unit_grads_fence[ZERO_MAX_CLASSES][2]; /* its last reduce-scatter */
    floatX* comm_scratch;     /* receive area of the reduce-scatter (P->rs_scratch) */
    /* stage 3: the order in which the model uses units in the current pass
       (zero_begin_pass), for prefetching; cursor = position of the last use */
    const int* schedule;
    int schedule_len, cursor;
    unsigned long long unit_grads_in_use;  /* bytes of unit-grad buffers holding grads (traces) */
    int unit_grads_busy[ZERO_MAX_CLASSES][2];
    int poison;               /* LLMC_POISON=1: released gathered slots are filled with NaN */
    /* optimizer offload (zero_offload_*): with OFFLOAD_HOST master, adam_m,
       adam_v above are host arrays; with OFFLOAD_DISK they are NULL and the
       scratch file holds them, streamed through off_buf[2] (one unit's
       [master | m | v] shard each); off_grads / off_params: staging of one
       unit's grad / param shard in host memory (BACKEND_OFFLOAD_STAGING) */
    OffloadFile off_file;
    float* off_buf[2];
    floatX* off_grads;
    floatX* off_params;
    unsigned long long off_staged[OFFL_NUM];    /* staging copies counted in optimizer steps */
    unsigned long long off_other_read, off_other_written; /* disk bytes outside the steps (init, checkpoints, states) */
    double off_wait_seconds;                    /* the step waited for reads of the next unit */
} ZeroEngine;

/* The bytes in use per ledger category right now, for the trace's memory
   counter: every category as allocated, except the transients of stages
   2-3, which count only while they hold something: the gathered slots that
   hold a unit, the unit-grad buffers between their zeroing and the end of
   their reduce-scatter (as far as the engine knows: until it waits). */
static inline void zero_trace_memory(ZeroEngine* E) {
    if (!tracer.on) return;
    unsigned long long b[MEM_NUM];
    for (int i = 0; i < MEM_NUM; i++) b[i] = E->ledger->allocated[i];
    b[MEM_GATHERED] = E->ledger->gathered_in_use;
    b[MEM_UNIT_GRADS] = E->unit_grads_in_use;
    trace_memory(b);
}

static inline void zero_engine_track_gathered(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    unsigned long long b = 0;
    for (int s = 0; s < P->num_slots; s++)
        if (E->slot_unit[s] >= 0) b += P->units[E->slot_unit[s]].padded;
    b *= (unsigned long long)P->param_bytes;
    E->ledger->gathered_in_use = b;
    if (b > E->ledger->gathered_peak) E->ledger->gathered_peak = b;
    zero_trace_memory(E);
}

/* ------------------------------------------------------------------------ */
/* Optimizer offload: buffers, the scratch file, access, the streamed step  */

/* Buffers of an offloaded optimizer, through the ledger (the tiers of
   zero_predict_offload_memory): host: master, m, v in host memory; disk:
   the two streaming buffers (the file itself: zero_offload_open); a staging
   backend: the grad and param staging shards. */
static inline void zero_offload_alloc(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t opt = zero_held_elements(P, ZB_OPT), ms = zero_offload_unit_max(P);
    E->off_file.fd = -1;
    if (P->offload == OFFLOAD_HOST) {
        if (P->master_bytes) E->master = (float*)ledger_alloc_host(L, MEM_MASTER, 4 * opt);
        E->adam_m = (float*)ledger_alloc_host(L, MEM_ADAM_M, 4 * opt);
        E->adam_v = (float*)ledger_alloc_host(L, MEM_ADAM_V, 4 * opt);
    } else {
        size_t b = (size_t)zero_offload_arrays(P) * 4 * ms;
        for (int i = 0; i < 2; i++)
            E->off_buf[i] = (float*)(P->offload_staging ? ledger_alloc_host(L, MEM_OFFLOAD_BUF, b)
                                                        : ledger_alloc(L, E->comm, MEM_OFFLOAD_BUF, b));
    }
    if (P->offload_staging) {
        E->off_grads = (floatX*)ledger_alloc_host(L, MEM_OFFLOAD_STAGING, (size_t)P->grad_bytes * ms);
        E->off_params = (floatX*)ledger_alloc_host(L, MEM_OFFLOAD_STAGING, (size_t)P->param_bytes * ms);
    }
}

static inline void zero_offload_free(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t opt = zero_held_elements(P, ZB_OPT), ms = zero_offload_unit_max(P);
    ledger_free_host(L, MEM_MASTER, E->master, 4 * opt);
    ledger_free_host(L, MEM_ADAM_M, E->adam_m, 4 * opt);
    ledger_free_host(L, MEM_ADAM_V, E->adam_v, 4 * opt);
    E->master = E->adam_m = E->adam_v = NULL;
    size_t b = (size_t)zero_offload_arrays(P) * 4 * ms;
    for (int i = 0; i < 2; i++) {
        if (P->offload_staging) ledger_free_host(L, MEM_OFFLOAD_BUF, E->off_buf[i], b);
        else ledger_free(L, MEM_OFFLOAD_BUF, E->off_buf[i], b);
        E->off_buf[i] = NULL;
    }
    ledger_free_host(L, MEM_OFFLOAD_STAGING, E->off_grads, (size_t)P->grad_bytes * ms);
    ledger_free_host(L, MEM_OFFLOAD_STAGING, E->off_params, (size_t)P->param_bytes * ms);
    E->off_grads = NULL; E->off_params = NULL;
    if (E->off_file.fd >= 0) {
        offload_file_close(&E->off_file);
        for (int i = 0; i < MEM_NUM; i++) L->allocated_disk[i] = 0;
    }
}

/* Collective (every rank calls it, after zero_engine_init): with
   --offload-optimizer disk:DIR, create this rank's scratch file
   DIR/optim_rank<r>.bin holding the own shards of master (when p < 4), m and
   v (zero_predict_offload_memory's disk bytes; zero, like the buffers they
   replace). First every rank checks that DIR is a directory and that its
   file system has room for the ranks of this node (they share DIR: local
   ranks x bytes); then every rank creates and reserves its file. Any
   failure ends every rank with one line naming DIR and the bytes needed
   (comm_check_all, exit 1), before a training step. Records the file's
   fstat size and reserved blocks in the ledger. No-op without disk offload. */
static inline void zero_offload_open(ZeroEngine* E, const char* dir) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    Comm* c = E->comm;
    if (P->offload != OFFLOAD_DISK) return;
    char err[ERRLEN] = "";
    unsigned long long need = 0;
    for (int i = 0; i < MEM_NUM; i++) need += L->predicted_disk[i];
    long long node = (long long)need * (c->local_size > 0 ? c->local_size : 1);
    struct stat st;
    if (!dir || !dir[0]) set_err(err, ERRLEN, "--offload-optimizer disk:DIR: DIR must not be empty");
    else if (stat(dir, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: %s (the optimizer states need %llu bytes there per rank)", dir, strerror(errno), need);
    else if (!S_ISDIR(st.st_mode)) set_err(err, ERRLEN, "--offload-optimizer disk:%s: not a directory (the optimizer states need %llu bytes there per rank)", dir, need);
    else {
        long long avail = offload_free_bytes(dir);
        if (avail < 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: cannot query its free space (%s)", dir, strerror(errno));
        else if (avail < node)
            set_err(err, ERRLEN, "--offload-optimizer disk:%s: the optimizer states need %lld bytes there (%d rank(s) on this node x %llu bytes: "
                    "the own shards of %s), but only %lld bytes are free", dir, node, c->local_size, need,
                    P->master_bytes ? "master, m, v" : "m, v", avail);
    }
    comm_check_all(c, err);
    if (offload_file_create(&E->off_file, dir, c->rank, (long long)need, err, ERRLEN) == 0) {
        if (fstat(E->off_file.fd, &st) != 0) set_err(err, ERRLEN, "--offload-optimizer disk:%s: fstat of %s failed (%s)", dir, E->off_file.path, strerror(errno));
        else { L->disk_file_bytes = (long long)st.st_size; L->disk_reserved_bytes = (long long)st.st_blocks * 512LL; }
        snprintf(L->disk_file, sizeof(L->disk_file), "%s", E->off_file.path);
        for (int i = 0; i < MEM_NUM; i++) L->allocated_disk[i] = L->predicted_disk[i];  /* the file's regions */
    }
    comm_check_all(c, err);
}

/* The optimizer arrays, for zero_opt_get / zero_opt_set. */
enum { ZO_MASTER = 0, ZO_M, ZO_V };

/* Byte offset in the scratch file of element x (unit coordinate, inside the
   own shard) of array `which` of unit u. Layout: unit after unit, each unit
   [master | m | v] of its own shard (master only when p < 4), so one unit's
   optimizer shard is one contiguous read and one write; the file holds
   4 x zero_offload_arrays x shard_parameters bytes. */
static inline long long zero_offload_file_offset(const ZeroPlan* P, int which, int u, size_t x) {
    size_t lo, hi;
    zero_update_range(P, u, &lo, &hi);
    int nm = P->master_bytes ? 1 : 0;
    long long slot = which == ZO_MASTER ? 0 : nm + (which - ZO_M);
    long long base = (long long)zero_offload_arrays(P) * (long long)zero_index(P, ZB_OPT, u, lo);
    return 4LL * (base + slot * (long long)(hi - lo) + (long long)(x - lo));
}

static inline void zero_opt_io(ZeroEngine* E, int which, int u, size_t x, float* host, size_t n, int write) {
    const ZeroPlan* P = E->plan;
    if (n == 0) return;
    if (which == ZO_MASTER && !P->master_bytes) comm_fatal(E->comm, "a master weight accessed without a master copy (a bug)");
    if (P->offload == OFFLOAD_DISK) {
        if (E->off_file.fd < 0) comm_fatal(E->comm, "optimizer states offloaded to disk but no scratch file is open (zero_offload_open not called: a bug)");
        long long off = zero_offload_file_offset(P, which, u, x);
        int e = offload_sync_io(&E->off_file, write, host, n * sizeof(float), off);
        if (e) comm_fatal(E->comm, "--offload-optimizer: %s %s at byte %lld failed (%s)", write ? "write to" : "read of", E->off_file.path, off, offload_strerror(e));
        if (write) E->off_other_written += n * sizeof(float); else E->off_other_read += n * sizeof(float);
        return;
    }
    float* base = which == ZO_MASTER ? E->master : which == ZO_M ? E->adam_m : E->adam_v;
    float* p = base + zero_index(P, ZB_OPT, u, x);
    if (P->offload == OFFLOAD_HOST) { if (write) memcpy(p, host, n * sizeof(float)); else memcpy(host, p, n * sizeof(float)); }
    else if (write) backend_to_device(p, host, n * sizeof(float));
    else backend_to_host(host, p, n * sizeof(float));
}

/* Read n fp32 values of optimizer array `which` (ZO_MASTER, ZO_M, ZO_V) of
   unit u from unit coordinate x on (x..x+n-1 inside zero_held_range(ZB_OPT))
   into host memory `out`, wherever the array lives (the backend's memory,
   host memory, the scratch file). zero_opt_set writes them. A failed disk
   transfer ends the job (comm_fatal: a scratch-file I/O error). Used for
   initialisation, checkpoints and training states (counted outside the
   steps), never by the optimizer step. */
static inline void zero_opt_get(ZeroEngine* E, int which, int u, size_t x, float* out, size_t n) {
    zero_opt_io(E, which, u, x, out, n, 0);
}
static inline void zero_opt_set(ZeroEngine* E, int which, int u, size_t x, const float* in, size_t n) {
    zero_opt_io(E, which, u, x, (float*)in, n, 1);
}

static inline void zero_offload_fail(ZeroEngine* E) {
    OffloadFile* F = &E->off_file;
    comm_fatal(E->comm, "--offload-optimizer: %s %s at byte %lld failed (%s)", F->error_write ? "write to" : "read of", F->path,
               F->error_offset, offload_strerror(F->error));
}

/* Allocate every model-state buffer the plan says this rank holds, and the
   transients of its stage (gathered slots, unit-grad buffers, comm scratch). */
static inline void zero_engine_init(ZeroEngine* E, ZeroPlan* P, Ledger* L, Comm* c) {
    memset(E, 0, sizeof(*E));
    E->plan = P; E->ledger = L; E->comm = c;
    const char* poison = getenv("LLMC_POISON");
    E->poison = poison && poison[0] == '1';
    size_t pb = (size_t)P->param_bytes, gb = (size_t)P->grad_bytes;
    E->params = (floatX*)ledger_alloc(L, c, MEM_PARAMS, pb * zero_held_elements(P, ZB_PARAMS));
    E->grads = (floatX*)ledger_alloc(L, c, MEM_GRADS, gb * zero_held_elements(P, ZB_GRADS));
    size_t opt = zero_held_elements(P, ZB_OPT);
    if (P->offload == OFFLOAD_NONE) {
        if (P->master_bytes) E->master = (float*)ledger_alloc(L, c, MEM_MASTER, 4 * opt);
        E->adam_m = (float*)ledger_alloc(L, c, MEM_ADAM_M, 4 * opt);
        E->adam_v = (float*)ledger_alloc(L, c, MEM_ADAM_V, 4 * opt);
    } else {
        zero_offload_alloc(E);
    }
    for (int k = 0; k < P->num_classes; k++) {
        const ZeroClass* K = &P->classes[k];
        for (int s = 0; s < K->num_slots; s++) {
            E->slots[K->first_slot + s] = (floatX*)ledger_alloc(L, c, MEM_GATHERED, pb * K->max_padded);
            E->slot_unit[K->first_slot + s] = -1;
        }
        if (P->zero_stage >= 2)
            for (int b = 0; b < K->grad_buffers; b++)
                E->unit_grads[k][b] = (floatX*)ledger_alloc(L, c, MEM_UNIT_GRADS, gb * K->max_padded);
    }
    if (P->rs_scratch && (P->num_ranks > 1 || P->replicas > 1)) {
        E->comm_scratch = (floatX*)ledger_alloc(L, c, MEM_COMM_SCRATCH, gb * P->max_padded);
        c->rs_scratch = E->comm_scratch;
        c->rs_scratch_bytes = E->comm_scratch ? gb * P->max_padded : 0;
    }
}

static inline void zero_engine_free(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t pb = (size_t)P->param_bytes, gb = (size_t)P->grad_bytes, opt = zero_held_elements(P, ZB_OPT);
    ledger_free(L, MEM_PARAMS, E->params, pb * zero_held_elements(P, ZB_PARAMS));
    ledger_free(L, MEM_GRADS, E->grads, gb * zero_held_elements(P, ZB_GRADS));
    if (P->offload == OFFLOAD_NONE) {
        ledger_free(L, MEM_MASTER, E->master, 4 * opt);
        ledger_free(L, MEM_ADAM_M, E->adam_m, 4 * opt);
        ledger_free(L, MEM_ADAM_V, E->adam_v, 4 * opt);
    } else {
        zero_offload_free(E);
    }
    for (int k = 0; k < P->num_classes; k++) {
        const ZeroClass* K = &P->classes[k];
        for (int s = 0; s < K->num_slots; s++) ledger_free(L, MEM_GATHERED, E->slots[K->first_slot + s], pb * K->max_padded);
        for (int b = 0; b < 2; b++) ledger_free(L, MEM_UNIT_GRADS, E->unit_grads[k][b], gb * K->max_padded);
    }
    ledger_free(L, MEM_COMM_SCRATCH, E->comm_scratch, gb * P->max_padded);
    if (E->comm_scratch) { E->comm->rs_scratch = NULL; E->comm->rs_scratch_bytes = 0; }
}

/* Start the all-gather of unit u into dst (padded elements), own shard taken
   from own_shard. Returns the backend fence that must be waited on
   (backend_wait_comm) before dst is read; 0 if nothing was sent. prev is the
   fence of the previous gather into dst: waited on first, so that the copy
   of the own shard never races a gather still writing dst. */
static inline unsigned long long zero_gather_into(ZeroEngine* E, int u, floatX* dst, const floatX* own_shard,
                                                  unsigned long long prev) {
    const ZeroPlan* P = E->plan;
    const ZeroUnit* U = &P->units[u];
    floatX* mine = dst + (size_t)P->rank * U->shard;
    backend_wait_comm(prev);
    if (mine != own_shard) backend_memcpy(mine, own_shard, U->shard * sizeof(floatX));
    E->comm->cur_unit = u;
    return P->num_ranks > 1 ? backend_all_gather_start(E->comm, dst, U->shard) : 0;
}

/* Stage 3: the slot of unit u (its class's slot idx mod num_slots). */
static inline int zero_slot_of(const ZeroPlan* P, int u) {
    const ZeroUnit* U = &P->units[u];
    const ZeroClass* K = &P->classes[U->cls];
    return K->first_slot + U->idx % K->num_slots;
}

/* Stage 3: make the slot of unit u hold u, issuing its all-gather if it does
   not yet; *fence = what to wait on before reading it. With may_evict = 0
   (a prefetch) nothing is issued when the slot holds another unit (that unit
   may still be in use): returns NULL then. Never waits for the gather. */
static inline floatX* zero_gather_unit(ZeroEngine* E, int u, int may_evict, unsigned long long* fence) {
    const ZeroPlan* P = E->plan;
    int s = zero_slot_of(P, u);
    if (E->slot_unit[s] != u) {
        if (E->slot_unit[s] >= 0 && !may_evict) return NULL;
        E->slot_fence[s] = zero_gather_into(E, u, E->slots[s], E->params + P->units[u].shard_offset, E->slot_fence[s]);
        E->slot_unit[s] = u;
        zero_engine_track_gathered(E);
    }
    *fence = E->slot_fence[s];
    return E->slots[s];
}

/* Stage 3: the order in which the next pass (a forward, or a forward and
   its backward) uses units; prefetching follows it. The list must stay
   valid until the next call. */
static inline void zero_begin_pass(ZeroEngine* E, const int* schedule, int len) {
    E->schedule = schedule; E->schedule_len = len; E->cursor = 0;
}

/* Parameters of unit u, full (padded) size, ready for compute. Stages 0-2:
   a view into the full buffer. Stage 3: the unit's slot, all-gathered if it
   does not hold u yet; then the `prefetch` units that follow u in the pass's
   schedule are gathered into their slots (free slots only) without waiting,
   so their gathers overlap u's compute. */
static inline floatX* zero_unit_params(ZeroEngine* E, int u) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 3) return E->params + P->units[u].offset;
    unsigned long long fence = 0, f2;
    floatX* p = zero_gather_unit(E, u, 1, &fence);
    if (E->schedule) {
        int pos = E->cursor;
        while (pos < E->schedule_len && E->schedule[pos] != u) pos++;
        if (pos < E->schedule_len) {
            E->cursor = pos;
            for (int k = 1; k <= P->prefetch && pos + k < E->schedule_len; k++) {
                int v = E->schedule[pos + k];
                if (v != u) (void)zero_gather_unit(E, v, 0, &f2);
            }
        }
    }
    backend_wait_comm(fence); /* compute waits for this unit's gather only */
    return p;
}

/* Stage 3: after a use of unit u. after_forward = 1 after its forward use:
   ZERO_RESHARD frees the slot, ZERO_KEEP_MICRO keeps it for the backward,
   ZERO_KEEP_STEP keeps it until the optimizer step; after_forward = 0 (its
   last use in the micro-step) frees it unless ZERO_KEEP_STEP. */
static inline void zero_release_unit(ZeroEngine* E, int u, int after_forward) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 3) return;
    int mode = P->classes[P->units[u].cls].mode;
    if (mode == ZERO_KEEP_STEP || (after_forward && mode == ZERO_KEEP_MICRO)) return;
    int s = zero_slot_of(P, u);
    if (E->slot_unit[s] == u) {
        E->slot_unit[s] = -1;
        zero_engine_track_gathered(E);
        if (E->poison) {   /* a later use without a new gather reads NaN */
            backend_wait_comm(E->slot_fence[s]);
            backend_memset_nan(E->slots[s], P->units[u].padded * sizeof(floatX));
        }
    }
}

/* Stage 3: every gathered unit is dropped (after the optimizer step changed
   the params, after an evaluation or a sample). */
static inline void zero_release_all(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 3) return;
    for (int s = 0; s < P->num_slots; s++) {
        if (E->poison && E->slot_unit[s] >= 0) {
            backend_wait_comm(E->slot_fence[s]);
            backend_memset_nan(E->slots[s], P->units[E->slot_unit[s]].padded * sizeof(floatX));
        }
        E->slot_unit[s] = -1;
    }
    zero_engine_track_gathered(E);
}

/* Gradient buffer of unit u (full padded size) into which backward
   accumulates. Stages 0-1: a view of the full grads (accumulating over
   micro-steps). Stages 2-3: a unit-grad buffer of u's class (in turn when
   the class has two), zeroed here after its previous reduce-scatter is
   done; the caller hands it to zero_unit_grads_done() when u's backward is
   complete. */
static inline floatX* zero_unit_grads(ZeroEngine* E, int u) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 2) return E->grads + P->units[u].offset;
    const ZeroUnit* U = &P->units[u];
    int b = U->idx % P->classes[U->cls].grad_buffers;
    backend_wait_comm(E->unit_grads_fence[U->cls][b]);
    floatX* g = E->unit_grads[U->cls][b];
    backend_memset_zero(g, U->padded * sizeof(floatX));
    if (!E->unit_grads_busy[U->cls][b]) {
        E->unit_grads_busy[U->cls][b] = 1;
        E->unit_grads_in_use += (unsigned long long)P->classes[U->cls].max_padded * (unsigned long long)P->grad_bytes;
        zero_trace_memory(E);
    }
    return g;
}

/* Stages 2-3: start the reduce-scatter of unit u's grads; the own shard of
   the sum is added into the persistent grad shard (dst = round(dst + sum):
   summed over ranks in rank order, then over micro-steps). The buffer is
   not touched again until the next zero_unit_grads of it, which waits. */
static inline void zero_unit_grads_done(ZeroEngine* E, int u) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 2) return;
    const ZeroUnit* U = &P->units[u];
    int b = U->idx % P->classes[U->cls].grad_buffers;
    floatX* g = E->unit_grads[U->cls][b];
    floatX* dst = E->grads + U->shard_offset;
    E->comm->cur_unit = u;
    if (P->num_ranks > 1) E->unit_grads_fence[U->cls][b] = backend_reduce_scatter_start(E->comm, g, U->shard, dst);
    else backend_add(dst, g, U->shard);
}

/* Wait until every reduce-scatter of unit grads has landed in the grad
   shards (before reading them: the embedding rows, the optimizer). */
static inline void zero_wait_grads(ZeroEngine* E) {
    for (int k = 0; k < E->plan->num_classes; k++)
        for (int b = 0; b < 2; b++) {
            backend_wait_comm(E->unit_grads_fence[k][b]);
            E->unit_grads_fence[k][b] = 0;
            E->unit_grads_busy[k][b] = 0;
        }
    if (E->unit_grads_in_use) { E->unit_grads_in_use = 0; zero_trace_memory(E); }
}

/* Start of an optimizer step: zero the gradient accumulators. */
static inline void zero_begin_step(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    backend_memset_zero(E->grads, (size_t)P->grad_bytes * zero_held_elements(P, ZB_GRADS));
}

/* After the last micro-step, stages 0-1: reduce-scatter each unit of the
   full grads into its own shard (in place). Stage 0 completes its
   all-reduce with zero_all_gather_grads afterwards (the same deterministic
   sums as every other stage). Stages 2-3 reduced during backward: this only
   waits for them. */
static inline void zero_reduce_scatter_grads(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    zero_wait_grads(E);
    if (P->num_ranks == 1 || P->zero_stage >= 2) return;
    unsigned long long f = 0;
    for (int u = 0; u < P->num_units; u++) {
        E->comm->cur_unit = u;
        f = backend_reduce_scatter_start(E->comm, E->grads + P->units[u].offset, P->units[u].shard, NULL);
    }
    backend_wait_comm(f); /* collectives complete in issue order */
}

/* HSDP: sum the own grad shard of every unit across the R replica groups
   (after the group's reduce-scatters and the embedding gradient): every
   group then holds the gradient of the whole global batch. No-op when R =
   1. */
static inline void zero_all_reduce_replicas(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (P->replicas == 1) return;
    unsigned long long f = 0;
    for (int u = 0; u < P->num_units; u++) {
        size_t lo, hi;
        zero_own_range(P, u, &lo, &hi);
        E->comm->cur_unit = u;
        f = backend_all_reduce_replicas_start(E->comm, E->grads + zero_index(P, ZB_GRADS, u, lo), hi - lo);
    }
    backend_wait_comm(f);
}

/* Stage 0: all-gather the reduced shards into every rank's full grads. */
static inline void zero_all_gather_grads(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (P->num_ranks == 1 || P->zero_stage != 0) return;
    unsigned long long f = 0;
    for (int u = 0; u < P->num_units; u++) {
        E->comm->cur_unit = u;
        f = backend_all_gather_start(E->comm, E->grads + P->units[u].offset, P->units[u].shard);
    }
    backend_wait_comm(f);
}

/* Global grad norm: each rank sums the squares of its OWN shard of every
   unit (whatever the stage; padding grads are zero: never written by a
   kernel, zeroed with the buffers), the sums are all-reduced. One sum per
   unit keeps the host waits of the CUDA backend to num_units per step. */
static inline double zero_grad_norm(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    double ss = 0.0;
    for (int u = 0; u < P->num_units; u++) {
        size_t lo, hi;
        zero_own_range(P, u, &lo, &hi);
        ss += sum_squares(E->grads + zero_index(P, ZB_GRADS, u, lo), hi - lo);
    }
    double buf[2] = {ss, 0.0};
    comm_group_sum_host(E->comm, buf, 1);   /* one copy of every gradient per shard group */
    return sqrt(buf[0]);
}

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

/* AdamW over an offloaded optimizer (stages 1-3), unit by unit: for unit u
   the own shard [lo, hi) of master, m, v is taken from host memory (host)
   or from the streaming buffer that the I/O thread filled (disk: the read
   of unit u+1 is queued before u is computed, the write of u after, so the
   file transfers overlap the arithmetic; two buffers suffice because the
   thread serves requests in order), and every tensor of u is updated on its
   overlap with [lo, hi) by the same adamw_update call, with the same
   arguments, as the in-memory step: the same elements, the same arithmetic,
   hence the same bits (the order of tensors is the plan's, as there; AdamW
   is elementwise). A staging backend (CUDA) copies u's reduced grad shard
   to host memory, runs adamw_host_update there and copies the param shard
   back (the shard's padding stays zero, as everywhere). A failed transfer
   ends the job (comm_fatal). */
static inline void zero_offload_adamw(ZeroEngine* E, const AdamWConfig* cfg, float scale, float b1c, float b2c) {
    const ZeroPlan* P = E->plan;
    int disk = P->offload == OFFLOAD_DISK, nm = P->master_bytes ? 1 : 0, U = P->num_units;
    OffloadFile* F = &E->off_file;
    unsigned long long ticket[2] = {0, 0}, last = 0;
    if (disk) {
        if (F->fd < 0) comm_fatal(E->comm, "optimizer states offloaded to disk but no scratch file is open (zero_offload_open not called: a bug)");
        size_t lo, hi;
        zero_update_range(P, 0, &lo, &hi);
        ticket[0] = offload_submit(F, 0, E->off_buf[0], 4 * (size_t)zero_offload_arrays(P) * (hi - lo), zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, 0, lo));
    }
    int t = 0;
    for (int u = 0; u < U; u++) {
        size_t lo, hi;
        zero_update_range(P, u, &lo, &hi);
        size_t len = hi - lo;
        float *w, *m, *v;
        if (disk) {
            double t0 = wall_seconds();
            if (offload_wait(F, ticket[u & 1])) zero_offload_fail(E);
            E->off_wait_seconds += wall_seconds() - t0;
            if (u + 1 < U) {
                size_t lo1, hi1;
                zero_update_range(P, u + 1, &lo1, &hi1);
                ticket[(u + 1) & 1] = offload_submit(F, 0, E->off_buf[(u + 1) & 1], 4 * (size_t)zero_offload_arrays(P) * (hi1 - lo1),
                                                     zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, u + 1, lo1));
            }
            float* b = E->off_buf[u & 1];
            w = nm ? b : NULL; m = b + (size_t)nm * len; v = m + len;
        } else {
            size_t io = zero_index(P, ZB_OPT, u, lo);
            w = E->master ? E->master + io : NULL; m = E->adam_m + io; v = E->adam_v + io;
        }
#if BACKEND_OFFLOAD_STAGING
        if (P->offload_staging) {
            backend_to_host(E->off_grads, E->grads + zero_index(P, ZB_GRADS, u, lo), len * sizeof(floatX));
            E->off_staged[OFFL_TO_HOST] += len * sizeof(floatX);
            if (!w) {
                backend_to_host(E->off_params, E->params + zero_index(P, ZB_PARAMS, u, lo), len * sizeof(floatX));
                E->off_staged[OFFL_TO_HOST] += len * sizeof(floatX);
            } else {
                memset(E->off_params, 0, len * sizeof(floatX));
            }
        }
#endif
        for (; t < P->num_tensors && P->tensors[t].unit == u; t++) {
            size_t a, n = zero_tensor_overlap(P, t, lo, hi, &a);
            if (!n) continue;
            size_t k = a - lo;
            float decay = P->tensors[t].decay ? cfg->weight_decay : 0.0f;
#if BACKEND_OFFLOAD_STAGING
            if (P->offload_staging) {
                adamw_host_update(E->off_params + k, w ? w + k : NULL, E->off_grads + k, m + k, v + k, n,
                                  cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps, decay, scale);
                continue;
            }
#endif
            adamw_update(E->params + zero_index(P, ZB_PARAMS, u, a), w ? w + k : NULL,
                         E->grads + zero_index(P, ZB_GRADS, u, a), m + k, v + k, n,
                         cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps, decay, scale);
        }
#if BACKEND_OFFLOAD_STAGING
        if (P->offload_staging) {
            backend_to_device(E->params + zero_index(P, ZB_PARAMS, u, lo), E->off_params, len * sizeof(floatX));
            E->off_staged[OFFL_TO_BACKEND] += len * sizeof(floatX);
        }
#endif
        if (disk) last = offload_submit(F, 1, E->off_buf[u & 1], 4 * (size_t)zero_offload_arrays(P) * len, zero_offload_file_offset(P, nm ? ZO_MASTER : ZO_M, u, lo));
    }
    if (disk && offload_wait(F, last)) zero_offload_fail(E);
}

/* AdamW (Loshchilov & Hutter) on this rank's range of every tensor (all of it
   at stage 0, the own shard at 1-3), weight decay only where the tensor says
   so, gradients clipped by the global norm (torch's clip_grad_norm_: scale
   min(1, clip/(norm+1e-6))). step t counts from 1. Then stages 1-2
   all-gather the updated params; stage 3 drops every gathered unit.
   Returns the grad norm before clipping. */
static inline double zero_optimizer_step(ZeroEngine* E, const AdamWConfig* cfg, int t) {
    const ZeroPlan* P = E->plan;
    double norm = zero_grad_norm(E);
    float scale = 1.0f;
    if (cfg->grad_clip > 0.0f && norm > cfg->grad_clip) scale = (float)(cfg->grad_clip / (norm + 1e-6));
    float b1c = 1.0f - powf(cfg->beta1, (float)t);
    float b2c = 1.0f - powf(cfg->beta2, (float)t);
    if (P->offload != OFFLOAD_NONE) zero_offload_adamw(E, cfg, scale, b1c, b2c);
    else
    for (int i = 0; i < P->num_tensors; i++) {
        int u = P->tensors[i].unit;
        size_t lo, hi, a;
        zero_update_range(P, u, &lo, &hi);
        size_t n = zero_tensor_overlap(P, i, lo, hi, &a);
        if (!n) continue;
        size_t io = zero_index(P, ZB_OPT, u, a);
        adamw_update(E->params + zero_index(P, ZB_PARAMS, u, a),
                     E->master ? E->master + io : NULL,
                     E->grads + zero_index(P, ZB_GRADS, u, a),
                     E->adam_m + io, E->adam_v + io, n,
                     cfg->lr, cfg->beta1, cfg->beta2, b1c, b2c, cfg->eps,
                     P->tensors[i].decay ? cfg->weight_decay : 0.0f, scale);
    }
    if ((P->zero_stage == 1 || P->zero_stage == 2) && P->num_ranks > 1) {
        unsigned long long f = 0;
        for (int u = 0; u < P->num_units; u++) {
            E->comm->cur_unit = u;
            f = backend_all_gather_start(E->comm, E->params + P->units[u].offset, P->units[u].shard);
        }
        backend_wait_comm(f); /* collectives complete in issue order */
    }
    zero_release_all(E);
    return norm;
}


/* ------------------------------------------------------------------------ */
/* Reports: predicted vs measured, beside the paper's formulas              */

/* Paper-formula bytes of each model-state category at this stage, on the
   unpadded Psi (what the ZeRO paper would print). */
static inline void zero_formula_memory(const ZeroPlan* P, double out[MEM_NUM]) {
    double psi = (double)P->num_parameters, N = (double)P->num_ranks;
    for (int i = 0; i < MEM_NUM; i++) out[i] = -1.0;
    out[MEM_PARAMS] = P->param_bytes * psi / (P->zero_stage >= 3 ? N : 1.0);
    out[MEM_GRADS] = P->grad_bytes * psi / (P->zero_stage >= 2 ? N : 1.0);
    out[MEM_MASTER] = P->master_bytes * psi / (P->zero_stage >= 1 ? N : 1.0);
    out[MEM_ADAM_M] = 4.0 * psi / (P->zero_stage >= 1 ? N : 1.0);
    out[MEM_ADAM_V] = out[MEM_ADAM_M];
}

/* Print predicted vs allocated bytes per category for this rank: the
   backend's memory, and with an offloaded optimizer the host and/or disk
   tier beside it (the disk total is the scratch file's fstat size). Returns
   the number of categories where they differ (each printed as ERROR). */
static inline int zero_print_memory(FILE* out, const ZeroPlan* P, const Ledger* L) {
    double f[MEM_NUM];
    zero_formula_memory(P, f);
    static const char* forms[4][5] = {
        {"p Psi", "g Psi", "4 Psi", "4 Psi", "4 Psi"},
        {"p Psi", "g Psi", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi/N", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"}};
    int p = P->param_bytes, g = P->grad_bytes, k = P->master_bytes + 8;
    /* the paper's per-rank model-state formula with this program's bytes */
    char law[96];
    switch (P->zero_stage) {
        case 0: snprintf(law, sizeof(law), "(p+g+k) Psi = %d Psi", p + g + k); break;
        case 1: snprintf(law, sizeof(law), "(p+g) Psi + k Psi/N = %d Psi + %d Psi/N", p + g, k); break;
        case 2: snprintf(law, sizeof(law), "p Psi + (g+k) Psi/N = %d Psi + %d Psi/N", p, g + k); break;
        default: snprintf(law, sizeof(law), "(p+g+k) Psi/N = %d Psi/N", p + g + k); break;
    }
    int off = P->offload != OFFLOAD_NONE;
    int hostcol = off && (P->offload == OFFLOAD_HOST || P->offload_staging), diskcol = P->offload == OFFLOAD_DISK;
    fprintf(out, "memory ledger, rank %d of %d%s, zero_stage %d: Psi = %zu parameters (%zu padded, %zu per shard), p=%d g=%d k=%d bytes/param%s\n",
            P->rank, P->num_ranks, P->replicas > 1 ? " in its shard group (HSDP: N = the group)" : "", P->zero_stage,
            P->num_parameters, P->padded_parameters, P->shard_parameters, p, g, k,
            P->offload == OFFLOAD_HOST ? "; optimizer states offloaded to host memory" : diskcol ? "; optimizer states offloaded to disk" : "");
    fprintf(out, "  %-28s %16s %16s", "category", "predicted B", "allocated B");
    if (hostcol) fprintf(out, " %16s %16s", "host pred. B", "host alloc. B");
    if (diskcol) fprintf(out, " %16s %16s", "disk pred. B", "disk alloc. B");
    fprintf(out, " %16s  %s\n", "paper formula B", off ? "(first two columns: the backend's memory)" : "");
    int bad = 0;
    unsigned long long tp = 0, ta = 0, th[2] = {0, 0}, td[2] = {0, 0};
    double tf = 0;
    for (int i = 0; i < MEM_NUM; i++) {
        if (i == MEM_MASTER && P->master_bytes == 0) continue;
        int used = L->predicted[i] || L->allocated[i] || L->predicted_host[i] || L->allocated_host[i] || L->predicted_disk[i] || L->allocated_disk[i];
        if ((i == MEM_OFFLOAD_BUF || i == MEM_OFFLOAD_STAGING) && !used) continue;
        int ok = L->predicted[i] == L->allocated[i] && L->predicted_host[i] == L->allocated_host[i] && L->predicted_disk[i] == L->allocated_disk[i];
        bad += !ok;
        tp += L->predicted[i]; ta += L->allocated[i];
        th[0] += L->predicted_host[i]; th[1] += L->allocated_host[i];
        td[0] += L->predicted_disk[i]; td[1] += L->allocated_disk[i];
        char fs[64] = "";
        if (f[i] >= 0) { snprintf(fs, sizeof(fs), "%16.0f  %s", f[i], forms[P->zero_stage][i < 5 ? i : 0]); tf += f[i]; }
        fprintf(out, "  %-28s %16llu %16llu", mem_names[i], L->predicted[i], L->allocated[i]);
        if (hostcol) fprintf(out, " %16llu %16llu", L->predicted_host[i], L->allocated_host[i]);
        if (diskcol) fprintf(out, " %16llu %16llu", L->predicted_disk[i], L->allocated_disk[i]);
        fprintf(out, " %s%s\n", fs[0] ? fs : "", ok ? "" : "   <-- ERROR: allocated != predicted");
        if (i == MEM_ADAM_V) {
            unsigned long long hp = 0, ha = 0, dp = 0, da = 0;
            for (int k2 = MEM_PARAMS; k2 <= MEM_ADAM_V; k2++) {
                hp += L->predicted_host[k2]; ha += L->allocated_host[k2]; dp += L->predicted_disk[k2]; da += L->allocated_disk[k2];
            }
            fprintf(out, "  %-28s %16llu %16llu", "= model states", ledger_model_states(L->predicted), ledger_model_states(L->allocated));
            if (hostcol) fprintf(out, " %16llu %16llu", hp, ha);
            if (diskcol) fprintf(out, " %16llu %16llu", dp, da);
            fprintf(out, " %16.0f  %s (%.2f bytes/param of Psi%s)\n", tf, law, (double)ledger_model_states(L->allocated) / (double)P->num_parameters,
                    off ? " in the backend's memory" : "");
        }
        /* the transients by unit class: which buffers they are */
        if ((i == MEM_GATHERED && L->predicted[i]) || (i == MEM_UNIT_GRADS && L->predicted[i])) {
            for (int c = 0; c < P->num_classes; c++) {
                const ZeroClass* K = &P->classes[c];
                int nbuf = i == MEM_GATHERED ? K->num_slots : K->grad_buffers;
                int eb = i == MEM_GATHERED ? p : g;
                if (!nbuf) continue;
                fprintf(out, "    %-26s %16llu %16s  %d x %zu elements (its largest unit)\n", K->name,
                        (unsigned long long)nbuf * K->max_padded * (unsigned long long)eb, "", nbuf, K->max_padded);
            }
        }
    }
    fprintf(out, "  %-28s %16llu %16llu", "= total", tp, ta);
    if (hostcol) fprintf(out, " %16llu %16llu", th[0], th[1]);
    if (diskcol) fprintf(out, " %16llu %16llu", td[0], td[1]);
    fprintf(out, "\n");
    if (diskcol) {
        int fok = L->disk_file_bytes == (long long)td[0];
        bad += !fok;
        fprintf(out, "  disk: scratch file %s (unlinked at creation: its space returns when the process ends): fstat size %lld B, "
                "%lld B of blocks reserved%s\n", L->disk_file[0] ? L->disk_file : "(not open)", L->disk_file_bytes, L->disk_reserved_bytes,
                fok ? "" : "   <-- ERROR: file size != predicted disk bytes");
    }
    fprintf(out, "  live at the peak: every buffer above (all are allocated at start and held to the end, so the peak is the total;"
                 " the trace's memory counter shows when the transients hold data)\n");
    fprintf(out, "  ledger: %s\n", bad ? "ERROR: mismatch" : (off ? "OK (allocated == predicted in every category and tier)" : "OK (allocated == predicted in every category)"));
    return bad;
}

/* Print counted vs predicted traffic of the training phase over `steps`
   optimizer steps, with the volume per step in units of Psi, the ZeRO
   paper's measure: ring wire bytes / (element bytes x (k-1)/k x Psi) for a
   collective over k ranks (the shard group's G for reduce-scatter,
   all-gather and the embedding rows; the R replica groups for HSDP's
   all-reduce of one shard, whose volume is therefore 2/G Psi), and at stage
   3 what each unit class contributed. Returns the number of mismatching
   collectives. */
static inline int zero_print_traffic(FILE* out, const ZeroPlan* P, const Comm* c, int steps) {
    unsigned long long per[COLL_NUM];
    zero_predict_traffic(P, per);
    int G = P->num_ranks, R = P->replicas;
    if (R > 1)
        fprintf(out, "traffic, rank %d of %d in its shard group, %d replica groups (HSDP), zero_stage %d, %d optimizer steps x %d micro-steps (training only):\n",
                P->rank, G, R, P->zero_stage, steps, P->grad_accum_steps);
    else
        fprintf(out, "traffic, rank %d of %d, zero_stage %d, %d optimizer steps x %d micro-steps (training only):\n",
                P->rank, G, P->zero_stage, steps, P->grad_accum_steps);
    fprintf(out, "  %-26s %8s %18s %18s %18s %10s\n", "collective", "calls", "handed B", "predicted B", "ring wire B", "Psi/step");
    int bad = 0;
    double inside = 0, across = 0;
    for (int k = 0; k < COLL_NUM; k++) {
        unsigned long long pred = per[k] * (unsigned long long)steps;
        int ok = c->handed[PHASE_TRAIN][k] == pred;
        bad += !ok;
        double psi = 0;
        int n = k == COLL_ALL_REDUCE ? R : G;
        if (k != COLL_SCALARS && n > 1 && steps > 0) {
            double elem = k == COLL_ALL_GATHER ? P->param_bytes : P->grad_bytes;
            psi = (double)c->wire[PHASE_TRAIN][k] / steps / (elem * (double)P->num_parameters * (n - 1) / (double)n);
            if (k == COLL_ALL_REDUCE) across += psi; else inside += psi;
        }
        fprintf(out, "  %-26s %8llu %18llu %18llu %18llu %10.3f%s\n", coll_name(k), c->calls[PHASE_TRAIN][k],
                c->handed[PHASE_TRAIN][k], pred, c->wire[PHASE_TRAIN][k], psi, ok ? "" : "   <-- ERROR: counted != predicted");
    }
    if (G > 1 || R > 1) {
        fprintf(out, "  volume per optimizer step: %.3f Psi (ZeRO paper: 2 Psi at stages 0-2, 3 Psi at stage 3)\n", inside + across);
        if (R > 1)
            fprintf(out, "  HSDP: %.3f Psi inside the %d-rank shard groups, %.3f Psi across the %d groups (the all-reduce of a 1/%d shard: 2/G Psi)\n",
                    inside, G, across, R, G);
        if (P->zero_stage == 3 && G > 1) {
            unsigned long long A = (unsigned long long)P->grad_accum_steps;
            fprintf(out, "  stage-3 all-gathers by unit class, per optimizer step:");
            for (int k = 0; k < P->num_classes; k++) {
                const ZeroClass* K = &P->classes[k];
                unsigned long long times = K->mode == ZERO_KEEP_STEP ? 1 : K->mode == ZERO_KEEP_MICRO ? A : A * (unsigned long long)K->uses;
                fprintf(out, "%s %s %.3f Psi (%llu x %.1f%% of Psi: %s)", k ? ";" : "", K->name,
                        (double)times * K->total_padded / (double)P->num_parameters, times,
                        100.0 * K->total_padded / (double)P->num_parameters,
                        K->mode == ZERO_KEEP_STEP ? "gathered once, kept for the step"
                        : K->mode == ZERO_KEEP_MICRO ? "kept from forward to backward" : "gathered before every use");
            }
            fprintf(out, "\n");
        }
    } else {
        fprintf(out, "  single rank: nothing crosses the wire\n");
    }
    fprintf(out, "  traffic: %s\n", bad ? "ERROR: mismatch" : "OK (counted == predicted for every collective)");
    return bad;
}

/* With an offloaded optimizer: bytes moved between tiers by the `steps`
   optimizer steps (disk: what the I/O thread transferred; staging: what the
   step copied), beside zero_predict_offload_traffic x steps, and the I/O
   thread's time and throughput. Returns the number of mismatches (0 and
   nothing printed without offload). */
static inline int zero_print_offload_traffic(FILE* out, const ZeroEngine* E, int steps) {
    const ZeroPlan* P = E->plan;
    if (P->offload == OFFLOAD_NONE) return 0;
    static const char* offl_names[OFFL_NUM] = {"disk -> memory (read)", "memory -> disk (write)",
                                               "device -> host (grads)", "host -> device (params)"};
    unsigned long long per[OFFL_NUM], counted[OFFL_NUM];
    zero_predict_offload_traffic(P, per);
    const OffloadFile* F = &E->off_file;
    for (int k = 0; k < OFFL_NUM; k++) counted[k] = E->off_staged[k];
    if (P->offload == OFFLOAD_DISK) { counted[OFFL_DISK_READ] = F->bytes_read; counted[OFFL_DISK_WRITE] = F->bytes_written; }
    fprintf(out, "offload traffic, rank %d of %d, zero_stage %d, %d optimizer steps: optimizer states in %s%s\n", P->rank, P->num_ranks,
            P->zero_stage, steps, P->offload == OFFLOAD_DISK ? "the scratch file " : "host memory", P->offload == OFFLOAD_DISK ? F->path : "");
    fprintf(out, "  %-26s %18s %18s %16s  %s\n", "between tiers", "counted B", "predicted B", "per step B", "formula (per rank and step)");
    int bad = 0, nm = P->master_bytes ? 1 : 0;
    char form[4][64];
    snprintf(form[OFFL_DISK_READ], 64, "%d Psi/N (%s of the own shards)", 4 * zero_offload_arrays(P), nm ? "master, m, v" : "m, v");
    snprintf(form[OFFL_DISK_WRITE], 64, "%d Psi/N", 4 * zero_offload_arrays(P));
    snprintf(form[OFFL_TO_HOST], 64, nm ? "g Psi/N (the reduced grad shards)" : "(g+p) Psi/N (grad and param shards)");
    snprintf(form[OFFL_TO_BACKEND], 64, "p Psi/N (the updated param shards)");
    for (int k = 0; k < OFFL_NUM; k++) {
        if (per[k] == 0 && counted[k] == 0) continue;
        unsigned long long pred = per[k] * (unsigned long long)steps;
        int ok = counted[k] == pred;
        bad += !ok;
        fprintf(out, "  %-26s %18llu %18llu %16llu  %s%s\n", offl_names[k], counted[k], pred, per[k], form[k], ok ? "" : "   <-- ERROR: counted != predicted");
    }
    if (P->offload == OFFLOAD_DISK) {
        double mb = (double)(F->bytes_read + F->bytes_written) / 1e6;
        fprintf(out, "  I/O thread: %.3f s in pread/pwrite (%.1f MB/s); the steps waited %.3f s for reads (%.3f s per step); "
                "outside the steps (init, checkpoints, states): %llu B read, %llu B written\n",
                F->io_seconds, F->io_seconds > 0 ? mb / F->io_seconds : 0.0, E->off_wait_seconds,
                steps > 0 ? E->off_wait_seconds / steps : 0.0, E->off_other_read, E->off_other_written);
    }
    fprintf(out, "  offload traffic: %s\n", bad ? "ERROR: mismatch" : "OK (counted == predicted between every pair of tiers)");
    return bad;
}

#endif /* ZERO_PLAN_ONLY */

#endif /* LLMC_ZERO_H */
