/*
 zero/ledger.h: every byte of the model states, the activations and the
 engine's transient buffers, by category: what the plan predicts
 (zero_predict_memory, from the plan alone; the model adds its
 activations) beside what was really allocated (every allocation goes
 through ledger_alloc). The reports (zero/report.h) print both columns and
 the paper's formula; a gap is a bug and the run exits 2.

 Categories (mem_names): params, grads, master weights, adam m, adam v (the
 model states: (p+g+k) Psi in the paper's notation, per stage as in
 llmc/zero.h), activations, and the transients: gathered units and unit
 grads (stage 3 and 2-3), comm scratch (the receive area of the CPU's
 deterministic reduce-scatter), gathered embedding rows, the embedding
 grad accumulator, and an offloaded optimizer's streaming buffers and
 staging. Tiers: the backend's memory (GPU memory in the CUDA build, host
 memory in the CPU build), page-locked host memory and disk (the offloaded
 optimizer, zero/optimizer.h).

 The allocators call the backend's backend_malloc, backend_free,
 backend_memset_zero (and, where BACKEND_OFFLOAD_STAGING is 1,
 backend_host_malloc / backend_host_free): include the backend header
 first (llmc/cpu/backend.h, llmc/cuda/backend.cuh), or define them (the
 unit tests do, tests/unit/test_zero.c).
*/
#ifndef LLMC_ZERO_LEDGER_H
#define LLMC_ZERO_LEDGER_H

#include "plan.h"


/* MEM_EMB_ROWS: every rank's rows of d(embedding output) and token ids,
   all-gathered (gpt.h); MEM_EMB_ACC: stages 0-1 with gradient accumulation,
   the embedding gradient of the own shard, summed over micro-steps until the
   step's reduce-scatter is done. */
/* MEM_INV_TREE: --invariant 1 with A > 1 micro-steps: log2(A) + 1 buffers
   of the own grad shards (and of the embedding gradient's own shards,
   gpt.h) that add the micro-steps' sums as a pairwise tree (engine.h,
   ZeroInvTree). */
/* MEM_OFFLOAD_BUF: --offload-optimizer disk, the two streaming buffers
   (one unit's shard of master, m, v each); MEM_OFFLOAD_STAGING: offload on
   a backend that cannot run AdamW on host memory (CUDA), one unit's grad
   shard and param shard in host memory. */
enum { MEM_PARAMS = 0, MEM_GRADS, MEM_MASTER, MEM_ADAM_M, MEM_ADAM_V, MEM_ACTIVATIONS,
       MEM_GATHERED, MEM_UNIT_GRADS, MEM_COMM_SCRATCH, MEM_EMB_ROWS, MEM_EMB_ACC,
       MEM_OFFLOAD_BUF, MEM_OFFLOAD_STAGING, MEM_RECOMPUTE, MEM_SECONDARY, MEM_INV_TREE, MEM_NUM };
static const char* mem_names[MEM_NUM] = {"params", "grads", "master weights", "adam m", "adam v",
                                         "activations", "gathered units (transient)", "unit grads (transient)",
                                         "comm scratch", "gathered embedding rows", "embedding grad accumulator",
                                         "optimizer streaming buffers", "offload staging (grad, param)", "recompute buffers (transient)",
                                         "secondary shard (hpZ)", "micro-step tree (--invariant)"};

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
    char formula[MEM_NUM][200];                 /* a category's closed form from the model (activations), printed beside it; "" none */
} Ledger;

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
        if (P->zero_stage >= 2 && !P->eval_only) L->predicted[MEM_UNIT_GRADS] += g * (unsigned long long)K->grad_buffers * K->max_padded;
    }
    /* Collectives run in place (the own shard of a full unit buffer receives
       the sum); a backend whose reduce-scatter is an all-to-all plus a sum in
       rank order (the CPU's, comm.h) receives into one unit-sized area. */
    if (P->rs_scratch && (P->num_ranks > 1 || P->replicas > 1)) L->predicted[MEM_COMM_SCRATCH] = zero_comm_scratch_bytes(P);
    L->predicted[MEM_SECONDARY] = p * P->secondary_elements;
    L->predicted[MEM_INV_TREE] = g * (unsigned long long)zero_inv_tree_buffers(P) * P->shard_parameters;
    zero_predict_offload_memory(P, L);
}

/* Model-state bytes (params, grads, master, m, v) of a ledger column. */
static inline unsigned long long ledger_model_states(const unsigned long long* col) {
    return col[MEM_PARAMS] + col[MEM_GRADS] + col[MEM_MASTER] + col[MEM_ADAM_M] + col[MEM_ADAM_V];
}

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
/* LLMC_POISON_ACTIVATIONS=1 (a debug switch; the emulated device's mutation
   check `uninit` uses it): activation buffers (MEM_ACTIVATIONS) start as
   0xFF bytes (NaN) instead of zeros, so a kernel that reads one before the
   forward wrote it shows (named by tests/cuda_emu/emu_race.h). */
static inline int ledger_poison_activations(void) {
    const char* e = getenv("LLMC_POISON_ACTIVATIONS");
    return e && e[0] == '1';
}
static inline void* ledger_alloc(Ledger* L, int cat, size_t bytes) {
    if (bytes == 0 || L->failed_category >= 0) return NULL;
    void* p = backend_malloc(bytes);
    if (!p) { L->failed_category = cat; L->failed_bytes = bytes; return NULL; }
    if (cat == MEM_ACTIVATIONS && ledger_poison_activations()) backend_memset_nan(p, bytes);
    else backend_memset_zero(p, bytes);
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

#endif /* LLMC_ZERO_LEDGER_H */
