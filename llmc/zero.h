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

typedef struct {
    int zero_stage;           /* 0..3 */
    int num_ranks, rank;      /* N, r */
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
   non-decreasing), copied. Returns 0, or 1 with a message in err for an
   impossible configuration (stage outside 0..3, N < 1, rank out of range,
   a tensor of size 0, units out of order). */
static inline int zero_plan_init(ZeroPlan* P, const ZeroTensor* tensors, int n, int num_units,
                                 int zero_stage, int num_ranks, int rank, int param_bytes, int grad_bytes,
                                 int reshard_after_forward, int prefetch, int grad_accum_steps,
                                 char* err, size_t errlen) {
    memset(P, 0, sizeof(*P));
    if (zero_stage < 0 || zero_stage > 3) return set_err(err, errlen, "-z %d: zero_stage must be 0, 1, 2 or 3", zero_stage);
    if (num_ranks < 1 || rank < 0 || rank >= num_ranks) return set_err(err, errlen, "shard plan: rank %d of %d is invalid", rank, num_ranks);
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
    P->zero_stage = zero_stage; P->num_ranks = num_ranks; P->rank = rank;
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
    size_t granule = (size_t)num_ranks * ZERO_ALIGN;
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
enum { MEM_PARAMS = 0, MEM_GRADS, MEM_MASTER, MEM_ADAM_M, MEM_ADAM_V, MEM_ACTIVATIONS,
       MEM_GATHERED, MEM_UNIT_GRADS, MEM_COMM_SCRATCH, MEM_EMB_ROWS, MEM_EMB_ACC, MEM_NUM };
static const char* mem_names[MEM_NUM] = {"params", "grads", "master weights", "adam m", "adam v",
                                         "activations", "gathered units (transient)", "unit grads (transient)",
                                         "comm scratch", "gathered embedding rows", "embedding grad accumulator"};

typedef struct {
    unsigned long long predicted[MEM_NUM];
    unsigned long long allocated[MEM_NUM];
    unsigned long long current, peak;           /* all categories */
    unsigned long long gathered_in_use, gathered_peak; /* stage-3 gathered bytes actually holding a unit */
    int failed_category;                        /* first allocation that failed, -1 if none */
    unsigned long long failed_bytes;
} Ledger;

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
    if (P->rs_scratch && P->num_ranks > 1) L->predicted[MEM_COMM_SCRATCH] = g * P->max_padded;
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
    if (P->num_ranks == 1) return;  /* nothing to communicate; the engine skips the calls */
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
}


/* ------------------------------------------------------------------------ */
/* Engine: executes the plan. Needs floatX, the Comm, and the backend        */
/* functions (llmc/cpu/backend.h or llmc/cuda/backend.cuh) declared first.  */
#ifndef ZERO_PLAN_ONLY
#include "comm.h"

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
} ZeroEngine;

static inline void zero_engine_track_gathered(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    unsigned long long b = 0;
    for (int s = 0; s < P->num_slots; s++)
        if (E->slot_unit[s] >= 0) b += P->units[E->slot_unit[s]].padded;
    b *= (unsigned long long)P->param_bytes;
    E->ledger->gathered_in_use = b;
    if (b > E->ledger->gathered_peak) E->ledger->gathered_peak = b;
}

/* Allocate every model-state buffer the plan says this rank holds, and the
   transients of its stage (gathered slots, unit-grad buffers, comm scratch). */
static inline void zero_engine_init(ZeroEngine* E, ZeroPlan* P, Ledger* L, Comm* c) {
    memset(E, 0, sizeof(*E));
    E->plan = P; E->ledger = L; E->comm = c;
    size_t pb = (size_t)P->param_bytes, gb = (size_t)P->grad_bytes;
    E->params = (floatX*)ledger_alloc(L, c, MEM_PARAMS, pb * zero_held_elements(P, ZB_PARAMS));
    E->grads = (floatX*)ledger_alloc(L, c, MEM_GRADS, gb * zero_held_elements(P, ZB_GRADS));
    size_t opt = zero_held_elements(P, ZB_OPT);
    if (P->master_bytes) E->master = (float*)ledger_alloc(L, c, MEM_MASTER, 4 * opt);
    E->adam_m = (float*)ledger_alloc(L, c, MEM_ADAM_M, 4 * opt);
    E->adam_v = (float*)ledger_alloc(L, c, MEM_ADAM_V, 4 * opt);
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
    if (P->rs_scratch && P->num_ranks > 1) {
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
    ledger_free(L, MEM_MASTER, E->master, 4 * opt);
    ledger_free(L, MEM_ADAM_M, E->adam_m, 4 * opt);
    ledger_free(L, MEM_ADAM_V, E->adam_v, 4 * opt);
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
    if (E->slot_unit[s] == u) { E->slot_unit[s] = -1; zero_engine_track_gathered(E); }
}

/* Stage 3: every gathered unit is dropped (after the optimizer step changed
   the params, after an evaluation or a sample). */
static inline void zero_release_all(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (P->zero_stage < 3) return;
    for (int s = 0; s < P->num_slots; s++) E->slot_unit[s] = -1;
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
    if (P->num_ranks > 1) E->unit_grads_fence[U->cls][b] = backend_reduce_scatter_start(E->comm, g, U->shard, dst);
    else backend_add(dst, g, U->shard);
}

/* Wait until every reduce-scatter of unit grads has landed in the grad
   shards (before reading them: the embedding rows, the optimizer). */
static inline void zero_wait_grads(ZeroEngine* E) {
    for (int k = 0; k < E->plan->num_classes; k++)
        for (int b = 0; b < 2; b++) { backend_wait_comm(E->unit_grads_fence[k][b]); E->unit_grads_fence[k][b] = 0; }
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
    for (int u = 0; u < P->num_units; u++)
        backend_wait_comm(backend_reduce_scatter_start(E->comm, E->grads + P->units[u].offset, P->units[u].shard, NULL));
}

/* Stage 0: all-gather the reduced shards into every rank's full grads. */
static inline void zero_all_gather_grads(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (P->num_ranks == 1 || P->zero_stage != 0) return;
    for (int u = 0; u < P->num_units; u++)
        backend_wait_comm(backend_all_gather_start(E->comm, E->grads + P->units[u].offset, P->units[u].shard));
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
    comm_allreduce_sum_host(E->comm, buf, 1);
    return sqrt(buf[0]);
}

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

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
        for (int u = 0; u < P->num_units; u++) {
            floatX* full = E->params + P->units[u].offset;
            backend_wait_comm(backend_all_gather_start(E->comm, full, P->units[u].shard));
        }
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

/* Print predicted vs allocated bytes per category for this rank. Returns
   the number of categories where they differ (each printed as ERROR). */
static inline int zero_print_memory(FILE* out, const ZeroPlan* P, const Ledger* L) {
    double f[MEM_NUM];
    zero_formula_memory(P, f);
    static const char* forms[4][5] = {
        {"p Psi", "g Psi", "4 Psi", "4 Psi", "4 Psi"},
        {"p Psi", "g Psi", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"},
        {"p Psi/N", "g Psi/N", "4 Psi/N", "4 Psi/N", "4 Psi/N"}};
    fprintf(out, "memory ledger, rank %d of %d, zero_stage %d: Psi = %zu parameters (%zu padded, %zu per shard), p=%d g=%d k=%d bytes/param\n",
            P->rank, P->num_ranks, P->zero_stage, P->num_parameters, P->padded_parameters, P->shard_parameters,
            P->param_bytes, P->grad_bytes, P->master_bytes + 8);
    fprintf(out, "  %-28s %16s %16s %16s  %s\n", "category", "predicted B", "allocated B", "paper formula B", "");
    int bad = 0;
    unsigned long long tp = 0, ta = 0;
    double tf = 0;
    for (int i = 0; i < MEM_NUM; i++) {
        if (i == MEM_MASTER && P->master_bytes == 0) continue;
        int ok = L->predicted[i] == L->allocated[i];
        bad += !ok;
        tp += L->predicted[i]; ta += L->allocated[i];
        char fs[64] = "";
        if (f[i] >= 0) { snprintf(fs, sizeof(fs), "%16.0f  %s", f[i], forms[P->zero_stage][i < 5 ? i : 0]); tf += f[i]; }
        fprintf(out, "  %-28s %16llu %16llu %s%s\n", mem_names[i], L->predicted[i], L->allocated[i], fs[0] ? fs : "", ok ? "" : "   <-- ERROR: allocated != predicted");
        if (i == MEM_ADAM_V) {
            fprintf(out, "  %-28s %16llu %16llu %16.0f  (%.2f bytes/param of Psi)\n", "= model states", ledger_model_states(L->predicted),
                    ledger_model_states(L->allocated), tf, (double)ledger_model_states(L->allocated) / (double)P->num_parameters);
        }
    }
    fprintf(out, "  %-28s %16llu %16llu\n", "= total", tp, ta);
    fprintf(out, "  ledger: %s\n", bad ? "ERROR: mismatch" : "OK (allocated == predicted in every category)");
    return bad;
}

/* Print counted vs predicted traffic of the training phase over `steps`
   optimizer steps, with the volume per step in units of Psi (ring wire
   bytes / (element bytes x (N-1)/N x Psi): the ZeRO paper's measure), and at
   stage 3 what each unit class contributed. Returns the number of
   mismatching collectives. */
static inline int zero_print_traffic(FILE* out, const ZeroPlan* P, const Comm* c, int steps) {
    unsigned long long per[COLL_NUM];
    zero_predict_traffic(P, per);
    int N = P->num_ranks;
    fprintf(out, "traffic, rank %d of %d, zero_stage %d, %d optimizer steps x %d micro-steps (training only):\n",
            P->rank, N, P->zero_stage, steps, P->grad_accum_steps);
    fprintf(out, "  %-26s %8s %18s %18s %18s %10s\n", "collective", "calls", "handed B", "predicted B", "ring wire B", "Psi/step");
    int bad = 0;
    double total_psi = 0, psi_unit = (double)P->num_parameters * (N - 1) / (double)N;
    for (int k = 0; k < COLL_NUM; k++) {
        unsigned long long pred = per[k] * (unsigned long long)steps;
        int ok = c->handed[PHASE_TRAIN][k] == pred;
        bad += !ok;
        double psi = 0;
        if (k != COLL_SCALARS && N > 1 && steps > 0) {
            double elem = k == COLL_ALL_GATHER ? P->param_bytes : P->grad_bytes;
            psi = (double)c->wire[PHASE_TRAIN][k] / steps / (elem * psi_unit);
            total_psi += psi;
        }
        fprintf(out, "  %-26s %8llu %18llu %18llu %18llu %10.3f%s\n", coll_name(k), c->calls[PHASE_TRAIN][k],
                c->handed[PHASE_TRAIN][k], pred, c->wire[PHASE_TRAIN][k], psi, ok ? "" : "   <-- ERROR: counted != predicted");
    }
    if (N > 1) {
        fprintf(out, "  volume per optimizer step: %.3f Psi (ZeRO paper: 2 Psi at stages 0-2, 3 Psi at stage 3)\n", total_psi);
        if (P->zero_stage == 3) {
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

#endif /* ZERO_PLAN_ONLY */

#endif /* LLMC_ZERO_H */
