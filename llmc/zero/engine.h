/*
 zero/engine.h: the ZeRO engine, which executes the plan (zero/plan.h) with
 the backend's buffers and collectives: it allocates what the plan says
 this rank holds (through the ledger), gathers stage-3 units before their
 use and releases them after as their class says, prefetches the next
 units of the pass's schedule, hands each unit's grads to a reduce-scatter
 (stages 2-3 during backward, 0-1 after it), all-reduces the own shards
 across HSDP replica groups, and completes stage 0's all-reduce. Every
 collective is queued on the backend's communication thread or stream and
 returns a fence; compute waits on the fence it needs, nothing more
 (docs/design.md section 5). It allocates the optimizer states too (master, m,
 v in the backend's memory or an offloaded tier); the optimizer step that
 uses them is zero/optimizer.h's, which includes this header (never the
 other way). Included through llmc/zero.h, after the backend.

 Needs floatX, the Comm (llmc/comm.h) and the backend functions
 (llmc/cpu/backend.h or llmc/cuda/backend.cuh) declared first.
*/
#ifndef LLMC_ZERO_ENGINE_H
#define LLMC_ZERO_ENGINE_H

#include "../comm_host.h"
#include "../trace.h"
#include "../offload.h"
#include "ledger.h"

/* --invariant 1 with A > 1 micro-steps (docs/design.md section 13): the
   micro-steps' sums (each the complete tree over its sequences, formed in a
   leaf buffer of n elements) added as the complete binary tree over the
   micro-steps: a binary counter of log2(A) + 1 buffers; stack[l] holds a
   pending sum of 2^l micro-steps. Each node is one floatX rounding
   (backend_add), so the bf16 program rounds at every node. */
#define ZERO_INV_MAX 24
typedef struct {
    floatX* stack[ZERO_INV_MAX];
    floatX* freel[ZERO_INV_MAX];
    floatX* mem;
    int nfree, nbuf;
    size_t n;
    floatX* cur;        /* the current micro-step's leaf (NULL: no tree) */
} ZeroInvTree;

static inline void zero_inv_tree_reset(ZeroInvTree* t) {
    t->nfree = 0;
    for (int i = 0; i < ZERO_INV_MAX; i++) t->stack[i] = NULL;
    for (int i = 0; i < t->nbuf; i++) t->freel[t->nfree++] = t->mem + (size_t)i * t->n;
    t->cur = NULL;
}
/* nbuf buffers of n elements at mem (nbuf = 0: no tree) */
static inline void zero_inv_tree_init(ZeroInvTree* t, floatX* mem, int nbuf, size_t n) {
    memset(t, 0, sizeof(*t));
    t->mem = mem; t->nbuf = mem ? nbuf : 0; t->n = n;
    zero_inv_tree_reset(t);
}
/* a zeroed leaf for the next micro-step (t->cur); NULL without a tree */
static inline floatX* zero_inv_tree_leaf(ZeroInvTree* t) {
    if (!t->nbuf) return NULL;
    if (!t->nfree) { fprintf(stderr, "error: internal: the micro-step tree ran out of buffers\n"); exit(2); }
    t->cur = t->freel[--t->nfree];
    backend_memset_zero(t->cur, t->n * sizeof(floatX));
    return t->cur;
}
/* the current leaf joins the pending sums (binary counter) */
static inline void zero_inv_tree_push(ZeroInvTree* t) {
    if (!t->cur) return;
    floatX* leaf = t->cur;
    int l = 0;
    while (t->stack[l]) {
        backend_add(leaf, t->stack[l], t->n);   /* leaf = round(leaf + pending): commutative, the pairing is the tree's */
        t->freel[t->nfree++] = t->stack[l];
        t->stack[l] = NULL;
        l++;
    }
    t->stack[l] = leaf;
    t->cur = NULL;
}
/* the sum of all pushed leaves (A a power of two: the one pending sum) */
static inline floatX* zero_inv_tree_root(ZeroInvTree* t) {
    floatX* r = NULL;
    for (int l = 0; l < ZERO_INV_MAX; l++) {
        if (!t->stack[l]) continue;
        if (!r) r = t->stack[l];
        else backend_add(r, t->stack[l], t->n);
    }
    return r;
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
    /* qwZ (P->quant_block): every unit's block layout (llmc/quant.h) over qseg, the tensor names for errors */
    QuantLayout* qlayout;
    QuantLayout* glayout;     /* qgZ (P->quant_grads_bits): the same over the grads' blocks */
    size_t* qseg;
    const char** qnames;
    /* hpZ (P->secondary > 1): every rank's 1/K part of the units gathered more
       than once per step (ZeroUnit.sec_offset), valid from the unit's first
       gather of the step until zero_release_all (the params change) */
    floatX* secondary;
    unsigned char* sec_valid;
    /* tests only (LLMC_TEST_NONFINITE=weights:S or grads:S): rank 0 puts a NaN
       into the first weight all-gather or unit grad of step S, to see the
       quantized collectives refuse it */
    int test_nan_weights, test_nan_grads;
    ZeroInvTree inv;          /* --invariant 1, A > 1: the micro-step tree of the own grad shards (shard space) */
    /* the optimizer steps whose AdamW update this rank's own shard holds
       (the caller sets the start: 0, or the step resumed from), and 1
       while that update runs (its loop has no collective): what a rescue
       (rescue.h) reads from another thread, __atomic */
    int steps_applied, updating;
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
/* The optimizer states' buffers: in the backend's memory or offloaded      */

/* Buffers of an offloaded optimizer, through the ledger (the tiers of
   zero_predict_offload_memory): host: master, m, v in host memory; disk:
   the two streaming buffers (the file itself: zero_offload_open); a staging
   backend: the grad and param staging shards. (zero_optimizer_alloc) */
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
                                                        : ledger_alloc(L, MEM_OFFLOAD_BUF, b));
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

/* The optimizer states of this rank, through the ledger (called by
   zero_engine_init after params and grads): master (when p < 4), m and v
   in the backend's memory, or the offloaded tiers (zero_offload_alloc).
   The step that uses them, and the scratch file of disk offload
   (zero_offload_open), are zero/optimizer.h's. */
static inline void zero_optimizer_alloc(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t opt = zero_held_elements(P, ZB_OPT);
    if (P->offload == OFFLOAD_NONE) {
        if (P->master_bytes) E->master = (float*)ledger_alloc(L, MEM_MASTER, 4 * opt);
        E->adam_m = (float*)ledger_alloc(L, MEM_ADAM_M, 4 * opt);
        E->adam_v = (float*)ledger_alloc(L, MEM_ADAM_V, 4 * opt);
    } else {
        zero_offload_alloc(E);
    }
}

static inline void zero_optimizer_free(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t opt = zero_held_elements(P, ZB_OPT);
    if (P->offload == OFFLOAD_NONE) {
        ledger_free(L, MEM_MASTER, E->master, 4 * opt);
        ledger_free(L, MEM_ADAM_M, E->adam_m, 4 * opt);
        ledger_free(L, MEM_ADAM_V, E->adam_v, 4 * opt);
    } else {
        zero_offload_free(E);
    }
}

/* Allocate every model-state buffer the plan says this rank holds (params,
   grads, then the optimizer states: zero_optimizer_alloc), and the
   transients of its stage (gathered slots, unit-grad buffers, comm
   scratch), all through the ledger. A failed allocation is recorded in the
   ledger (failed_category) for the caller to report. */
static inline void zero_engine_init(ZeroEngine* E, ZeroPlan* P, Ledger* L, Comm* c) {
    memset(E, 0, sizeof(*E));
    E->plan = P; E->ledger = L; E->comm = c;
    const char* poison = getenv("LLMC_POISON");
    E->poison = poison && poison[0] == '1';
    const char* tn = getenv("LLMC_TEST_NONFINITE");
    if (tn && !strncmp(tn, "weights:", 8)) E->test_nan_weights = atoi(tn + 8);
    if (tn && !strncmp(tn, "grads:", 6)) E->test_nan_grads = atoi(tn + 6);
    size_t pb = (size_t)P->param_bytes, gb = (size_t)P->grad_bytes;
    E->params = (floatX*)ledger_alloc(L, MEM_PARAMS, pb * zero_held_elements(P, ZB_PARAMS));
    E->grads = (floatX*)ledger_alloc(L, MEM_GRADS, gb * zero_held_elements(P, ZB_GRADS));
    zero_optimizer_alloc(E);
    for (int k = 0; k < P->num_classes; k++) {
        const ZeroClass* K = &P->classes[k];
        for (int s = 0; s < K->num_slots; s++) {
            E->slots[K->first_slot + s] = (floatX*)ledger_alloc(L, MEM_GATHERED, pb * K->max_padded);
            E->slot_unit[K->first_slot + s] = -1;
        }
        if (P->zero_stage >= 2 && !P->eval_only)
            for (int b = 0; b < K->grad_buffers; b++)
                E->unit_grads[k][b] = (floatX*)ledger_alloc(L, MEM_UNIT_GRADS, gb * K->max_padded);
    }
    if (P->rs_scratch && (P->num_ranks > 1 || P->replicas > 1)) {
        E->comm_scratch = (floatX*)ledger_alloc(L, MEM_COMM_SCRATCH, zero_comm_scratch_bytes(P));
        c->rs_scratch = E->comm_scratch;
        c->rs_scratch_bytes = E->comm_scratch ? zero_comm_scratch_bytes(P) : 0;
    }
    if (zero_inv_tree_buffers(P)) {
        int nb = zero_inv_tree_buffers(P);
        zero_inv_tree_init(&E->inv, (floatX*)ledger_alloc(L, MEM_INV_TREE, gb * (size_t)nb * P->shard_parameters), nb, P->shard_parameters);
    }
    if (P->secondary > 1) {
        E->secondary = (floatX*)ledger_alloc(L, MEM_SECONDARY, pb * P->secondary_elements);
        E->sec_valid = (unsigned char*)calloc_or_die((size_t)P->num_units, 1, "hpZ flags");
    }
    if (P->quant_block || P->quant_grads_bits) {   /* qwZ, qgZ: every unit's block layouts, for the quantized collectives */
        E->qseg = (size_t*)malloc_or_die((size_t)P->num_tensors * sizeof(size_t), "qwZ layouts");
        E->qlayout = (QuantLayout*)malloc_or_die((size_t)P->num_units * sizeof(QuantLayout), "qwZ layouts");
        E->glayout = (QuantLayout*)malloc_or_die((size_t)P->num_units * sizeof(QuantLayout), "qgZ layouts");
        E->qnames = (const char**)malloc_or_die((size_t)P->num_tensors * sizeof(char*), "qwZ layouts");
        for (int u = 0; u < P->num_units; u++) {
            const ZeroUnit* U = &P->units[u];
            size_t* seg = E->qseg + U->first_tensor;
            for (int k = 0; k < U->num_tensors; k++) {
                seg[k] = P->tensors[U->first_tensor + k].offset;
                E->qnames[U->first_tensor + k] = P->tensors[U->first_tensor + k].name;
            }
            QuantLayout Q = {seg, U->num_tensors, U->padded, U->shard, P->quant_block, 8, E->qnames + U->first_tensor};
            E->qlayout[u] = Q;
            QuantLayout G = {seg, U->num_tensors, U->padded, U->shard, P->quant_grads_block, P->quant_grads_bits, E->qnames + U->first_tensor};
            E->glayout[u] = G;
        }
    }
}

static inline void zero_engine_free(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    Ledger* L = E->ledger;
    size_t pb = (size_t)P->param_bytes, gb = (size_t)P->grad_bytes;
    ledger_free(L, MEM_PARAMS, E->params, pb * zero_held_elements(P, ZB_PARAMS));
    ledger_free(L, MEM_GRADS, E->grads, gb * zero_held_elements(P, ZB_GRADS));
    zero_optimizer_free(E);
    for (int k = 0; k < P->num_classes; k++) {
        const ZeroClass* K = &P->classes[k];
        for (int s = 0; s < K->num_slots; s++) ledger_free(L, MEM_GATHERED, E->slots[K->first_slot + s], pb * K->max_padded);
        for (int b = 0; b < 2; b++) ledger_free(L, MEM_UNIT_GRADS, E->unit_grads[k][b], gb * K->max_padded);
    }
    ledger_free(L, MEM_COMM_SCRATCH, E->comm_scratch, zero_comm_scratch_bytes(P));
    if (E->comm_scratch) { E->comm->rs_scratch = NULL; E->comm->rs_scratch_bytes = 0; }
    ledger_free(L, MEM_SECONDARY, E->secondary, pb * P->secondary_elements);
    free(E->sec_valid); E->sec_valid = NULL;
    if (E->inv.mem) ledger_free(L, MEM_INV_TREE, E->inv.mem, gb * (size_t)E->inv.nbuf * P->shard_parameters);
    E->inv.mem = NULL; E->inv.nbuf = 0;
    free(E->qseg); free(E->qlayout); free(E->glayout); free((void*)E->qnames);
    E->qseg = NULL; E->qlayout = NULL; E->glayout = NULL; E->qnames = NULL;
}

/* Start the all-gather of unit u into dst (padded elements), own shard taken
   from own_shard. Returns the backend fence that must be waited on
   (backend_wait_comm) before dst is read; 0 if nothing was sent. prev is the
   fence of the previous gather into dst: waited on first, so that the copy
   of the own shard never races a gather still writing dst. With qwZ
   (P->quant_block) every rank's shard crosses as int8 blocks with fp32
   scales (llmc/quant.h) and every rank, this one included, dequantizes all
   of them: the gathered unit is the same on every rank. */
static inline unsigned long long zero_gather_into(ZeroEngine* E, int u, floatX* dst, const floatX* own_shard,
                                                  unsigned long long prev) {
    const ZeroPlan* P = E->plan;
    const ZeroUnit* U = &P->units[u];
    floatX* mine = dst + (size_t)P->rank * U->shard;
    backend_wait_comm(prev);
    E->comm->cur_unit = u;
    if (U->sec_offset != ZERO_NO_SECONDARY && P->num_ranks > 1) {   /* hpZ */
        size_t part = U->padded / (size_t)P->secondary;
        floatX* sec = E->secondary + U->sec_offset;
        if (E->sec_valid[u]) return backend_all_gather_secondary_start(E->comm, dst, part, sec);
        E->sec_valid[u] = 1;   /* this gather keeps this rank's part once it has arrived (in issue order) */
        E->comm->keep = sec;
        E->comm->keep_off = (size_t)E->comm->secondary_rank * part;   /* its place in the secondary group (one node's ranks, or K consecutive) */
        E->comm->keep_count = part;
    }
    if (mine != own_shard) backend_memcpy(mine, own_shard, U->shard * sizeof(floatX));
    if (E->test_nan_weights && E->test_nan_weights == comm_watch.step && P->rank == 0) {
        E->test_nan_weights = 0;
        backend_memset_nan(mine, sizeof(floatX));
    }
    if (P->num_ranks == 1) return 0;
    if (P->quant_block) return backend_all_gather_quantized_start(E->comm, dst, &E->qlayout[u], U->qblocks, u);
    return backend_all_gather_start(E->comm, dst, U->shard);
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
    if (E->sec_valid) memset(E->sec_valid, 0, (size_t)P->num_units);
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
    floatX* dst = (E->inv.cur ? E->inv.cur : E->grads) + U->shard_offset;   /* --invariant 1, A > 1: the micro-step's leaf */
    if (E->test_nan_grads && E->test_nan_grads == comm_watch.step && P->rank == 0) {
        E->test_nan_grads = 0;
        backend_memset_nan(g, sizeof(floatX));
    }
    E->comm->cur_unit = u;
    if (P->num_ranks > 1 && P->quant_grads_bits)   /* qgZ */
        E->unit_grads_fence[U->cls][b] = backend_reduce_scatter_quantized_start(E->comm, g, &E->glayout[u], U->gblocks, dst, u);
    else if (P->num_ranks > 1) E->unit_grads_fence[U->cls][b] = backend_reduce_scatter_start(E->comm, g, U->shard, dst);
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
    if (E->inv.nbuf) zero_inv_tree_reset(&E->inv);
}

/* --invariant 1, A > 1: before a micro-step's backward, a zeroed leaf of
   the micro-step tree receives the micro-step's reduced own shards. */
static inline void zero_inv_begin_micro(ZeroEngine* E) {
    if (E->inv.nbuf) zero_inv_tree_leaf(&E->inv);
}

/* --invariant 1, A > 1: after a micro-step's backward: stages 0-1
   reduce-scatter the full grads into the leaf now (every micro-step, as
   stages 2-3 do: a rank's micro-step is then a subtree) and zero them for
   the next one; stages 2-3 wait for their reduce-scatters. Then the leaf
   joins the tree. */
static inline void zero_inv_end_micro(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    if (!E->inv.nbuf || !E->inv.cur) return;
    zero_wait_grads(E);
    if (P->zero_stage <= 1) {
        unsigned long long f = 0;
        for (int u = 0; u < P->num_units; u++) {
            const ZeroUnit* U = &P->units[u];
            E->comm->cur_unit = u;
            if (P->num_ranks > 1) f = backend_reduce_scatter_start(E->comm, E->grads + U->offset, U->shard, E->inv.cur + U->shard_offset);
            else backend_add(E->inv.cur + U->shard_offset, E->grads + U->offset, U->shard);
        }
        backend_wait_comm(f);
        backend_memset_zero(E->grads, (size_t)P->grad_bytes * zero_held_elements(P, ZB_GRADS));
    }
    zero_inv_tree_push(&E->inv);
}

/* After the last micro-step, stages 0-1: reduce-scatter each unit of the
   full grads into its own shard (in place). Stage 0 completes its
   all-reduce with zero_all_gather_grads afterwards (the same deterministic
   sums as every other stage). Stages 2-3 reduced during backward: this only
   waits for them. */
static inline void zero_reduce_scatter_grads(ZeroEngine* E) {
    const ZeroPlan* P = E->plan;
    zero_wait_grads(E);
    if (E->inv.nbuf) {   /* --invariant 1, A > 1: the tree's root into the own shards (zero: 0 + root) */
        floatX* root = zero_inv_tree_root(&E->inv);
        for (int u = 0; u < P->num_units && root; u++) {
            size_t lo, hi;
            zero_own_range(P, u, &lo, &hi);
            backend_add(E->grads + zero_index(P, ZB_GRADS, u, lo), root + P->units[u].shard_offset, hi - lo);
        }
        return;
    }
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

#endif /* LLMC_ZERO_ENGINE_H */
