/*
 test_zero.c: unit tests of the shard plan, the memory ledger's predictions,
 the traffic predictions and the closed-form estimator of llmc/zero.h, and
 the offloaded optimizer's tiers, buffers and bytes between tiers.
 Only zero/plan.h, zero/ledger.h and zero/estimate.h are compiled: no
 MPI, no backend (the ledger's allocators get host-memory stand-ins). Every expected value is computed here with its own arithmetic
 (written out below), never by calling the function under test.

   gcc -O2 -std=gnu11 -Wall -I. tests/unit/test_zero.c -o /tmp/test_zero -lm
   /tmp/test_zero            (last line: "N passed, M failed"; exit 1 on failure)
*/
#include <stdlib.h>
#include <string.h>
/* the ledger's allocators call the backend's memory functions: host memory here */
static inline void* backend_malloc(size_t bytes) { return malloc(bytes); }
static inline void backend_free(void* p) { free(p); }
static inline void backend_memset_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
#include "llmc/zero/plan.h"
#include "llmc/zero/ledger.h"
#include "llmc/zero/estimate.h"

#include <math.h>

#include "tests/check.h"

/* ------------------------------------------------------------------------ */
/* tensor lists                                                              */

#define MAXT 256
typedef struct {
    const char* name;
    int n, num_units;
    ZeroTensor t[MAXT];
} TList;

static void tl_add(TList* l, const char* name, int unit, size_t size, int decay) {
    ZeroTensor* t = &l->t[l->n++];
    t->name = name; t->unit = unit; t->size = size; t->decay = decay; t->offset = 0;
    if (unit + 1 > l->num_units) l->num_units = unit + 1;
}

/* GPT-2 tensor list written out by hand: root {wte Vp*C, wpe maxT*C, lnfw C,
   lnfb C}, block {ln1w C, ln1b C, qkvw 3C*C, qkvb 3C, attprojw C*C, attprojb C,
   ln2w C, ln2b C, fcw 4C*C, fcb 4C, fcprojw C*4C, fcprojb C}. */
static void tl_gpt2(TList* l, const char* name, int L, size_t C, size_t Vp, size_t maxT) {
    memset(l, 0, sizeof(*l)); l->name = name;
    tl_add(l, "wte", 0, Vp * C, 1); tl_add(l, "wpe", 0, maxT * C, 1);
    tl_add(l, "lnfw", 0, C, 0); tl_add(l, "lnfb", 0, C, 0);
    for (int b = 1; b <= L; b++) {
        tl_add(l, "ln1w", b, C, 0); tl_add(l, "ln1b", b, C, 0);
        tl_add(l, "qkvw", b, 3 * C * C, 1); tl_add(l, "qkvb", b, 3 * C, 0);
        tl_add(l, "attprojw", b, C * C, 1); tl_add(l, "attprojb", b, C, 0);
        tl_add(l, "ln2w", b, C, 0); tl_add(l, "ln2b", b, C, 0);
        tl_add(l, "fcw", b, 4 * C * C, 1); tl_add(l, "fcb", b, 4 * C, 0);
        tl_add(l, "fcprojw", b, 4 * C * C, 1); tl_add(l, "fcprojb", b, C, 0);
    }
}

/* Independent layout: tensor offsets (each tensor starts at the next multiple
   of 16 after the previous one's end), unit sizes (end of the last tensor
   rounded up to 16), padded (rounded up to N*16), shard = padded/N. */
typedef struct {
    size_t toff[MAXT];
    size_t usize[MAXT], upadded[MAXT], ushard[MAXT], uoff[MAXT], usoff[MAXT];
    size_t psi, full, sharded, root, maxblk, maxshard;
} Expect;

static size_t up16(size_t x) { return (x + 15) / 16 * 16; }

static void expect_layout(const TList* l, int N, Expect* e) {
    memset(e, 0, sizeof(*e));
    size_t end[MAXT] = {0};
    for (int i = 0; i < l->n; i++) {
        int u = l->t[i].unit;
        e->toff[i] = up16(end[u]);
        end[u] = e->toff[i] + l->t[i].size;
        e->psi += l->t[i].size;
    }
    size_t gran = 16 * (size_t)N;
    for (int u = 0; u < l->num_units; u++) {
        e->usize[u] = up16(end[u]);
        size_t k = (e->usize[u] + gran - 1) / gran;     /* granules needed */
        e->upadded[u] = k * gran;
        e->ushard[u] = k * 16;                          /* = padded / N */
        e->uoff[u] = e->full; e->usoff[u] = e->sharded;
        e->full += e->upadded[u]; e->sharded += e->ushard[u];
        if (u > 0 && e->upadded[u] > e->maxblk) e->maxblk = e->upadded[u];
        if (e->ushard[u] > e->maxshard) e->maxshard = e->ushard[u];
    }
    e->root = e->upadded[0];
}

/* the spec of a plan with the default unit classes (unit 0 root, the rest blocks) */
static ZeroSpec spec_of(const ZeroTensor* t, int n, int num_units, int stage, int N, int rank, int pb, int gb,
                        int reshard, int prefetch, int A) {
    ZeroSpec s;
    memset(&s, 0, sizeof(s));
    s.tensors = t; s.num_tensors = n; s.num_units = num_units; s.zero_stage = stage;
    s.num_ranks = N; s.rank = rank; s.replicas = 1; s.param_bytes = pb; s.grad_bytes = gb;
    s.reshard_after_forward = reshard; s.prefetch = prefetch; s.grad_accum_steps = A;
    return s;
}
static int plan_init_simple(ZeroPlan* P, const TList* l, int stage, int N, int rank, int pb, int gb,
                            int reshard, int prefetch, int A, char* err) {
    ZeroSpec s = spec_of(l->t, l->n, l->num_units, stage, N, rank, pb, gb, reshard, prefetch, A);
    return zero_plan_init(P, &s, err, ERRLEN);
}

/* ------------------------------------------------------------------------ */
/* 1. layout, ranges, coverage, index maps                                   */

static void test_layout(const TList* l) {
    static const int Ns[] = {1, 2, 3, 4, 5, 8, 64};
    char name[128];
    snprintf(name, sizeof(name), "plan layout/coverage/index: %s", l->name);
    check_group_begin();
    for (size_t ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++) {
        int N = Ns[ni];
        Expect e;
        expect_layout(l, N, &e);
        for (int stage = 0; stage <= 3; stage++) {
            char err[ERRLEN] = "";
            ZeroPlan P;
            int rc = plan_init_simple(&P, l, stage, N, 0, 2, 2, 1, 1, 1, err);
            CHECK(rc == 0, "N=%d stage %d: init failed: %s", N, stage, err);
            if (rc) { zero_plan_free(&P); continue; }
            CHECK(P.num_parameters == e.psi, "N=%d: Psi %zu, expected %zu", N, P.num_parameters, e.psi);
            CHECK(P.padded_parameters == e.full, "N=%d: padded %zu, expected %zu", N, P.padded_parameters, e.full);
            CHECK(P.shard_parameters == e.sharded, "N=%d: shard params %zu, expected %zu", N, P.shard_parameters, e.sharded);
            CHECK(P.shard_parameters * (size_t)N == P.padded_parameters, "N=%d: shard*N != padded", N);
            CHECK(P.max_block_padded == e.maxblk, "N=%d: max block %zu, expected %zu", N, P.max_block_padded, e.maxblk);
            CHECK(P.max_shard == e.maxshard, "N=%d: max shard %zu, expected %zu", N, P.max_shard, e.maxshard);

            /* units: padded multiple of N*ALIGN, >= size, equal shards, offsets */
            int ok_units = 1;
            for (int u = 0; u < l->num_units; u++) {
                const ZeroUnit* U = &P.units[u];
                if (U->padded % ((size_t)N * ZERO_ALIGN) || U->padded < U->size || U->shard * (size_t)N != U->padded ||
                    U->size != e.usize[u] || U->padded != e.upadded[u] || U->shard != e.ushard[u] ||
                    U->offset != e.uoff[u] || U->shard_offset != e.usoff[u]) {
                    ok_units = 0;
                    CHECK(0, "N=%d stage %d unit %d: size %zu padded %zu shard %zu off %zu soff %zu; expected %zu %zu %zu %zu %zu",
                          N, stage, u, U->size, U->padded, U->shard, U->offset, U->shard_offset,
                          e.usize[u], e.upadded[u], e.ushard[u], e.uoff[u], e.usoff[u]);
                }
            }
            CHECK(ok_units, "N=%d stage %d: unit sizes", N, stage);

            /* tensors: aligned starts, no overlap, inside the unit */
            int ok_t = 1;
            for (int i = 0; i < l->n; i++) {
                const ZeroTensor* T = &P.tensors[i];
                if (T->offset % ZERO_ALIGN || T->offset != e.toff[i] || T->offset + T->size > P.units[T->unit].size) ok_t = 0;
                if (i > 0 && P.tensors[i - 1].unit == T->unit && P.tensors[i - 1].offset + P.tensors[i - 1].size > T->offset) ok_t = 0;
                if (T->size != l->t[i].size || T->unit != l->t[i].unit) ok_t = 0;
            }
            CHECK(ok_t, "N=%d stage %d: tensor offsets aligned, in order, not overlapping", N, stage);

            /* the plan of every rank (the same spec but the rank) */
            ZeroPlan* PR = (ZeroPlan*)calloc((size_t)N, sizeof(ZeroPlan));
            for (int r = 0; r < N; r++) {
                int rc2 = plan_init_simple(&PR[r], l, stage, N, r, 2, 2, 1, 1, 1, err);
                CHECK(rc2 == 0, "N=%d stage %d rank %d: init failed: %s", N, stage, r, err);
            }
            /* own ranges cover every unit exactly once */
            int ok_cover = 1, ok_tcover = 1, ok_pad = 1, ok_upd = 1;
            for (int u = 0; u < l->num_units; u++) {
                size_t pad = e.upadded[u];
                unsigned char* mark = (unsigned char*)calloc(pad, 1);
                unsigned char* is_t = (unsigned char*)calloc(pad, 1);
                for (int i = 0; i < l->n; i++)
                    if (l->t[i].unit == u) for (size_t x = 0; x < l->t[i].size; x++) is_t[e.toff[i] + x] = 1;
                for (int r = 0; r < N; r++) {
                    const ZeroPlan* Pr = &PR[r];
                    size_t lo, hi;
                    zero_own_range(Pr, u, &lo, &hi);
                    if (lo != (size_t)r * e.ushard[u] || hi != lo + e.ushard[u] || hi > pad) { ok_cover = 0; continue; }
                    for (size_t x = lo; x < hi; x++) mark[x]++;
                }
                for (size_t x = 0; x < pad; x++) if (mark[x] != 1) ok_cover = 0;

                /* tensor elements: covered exactly once by own-range overlaps;
                   padding never inside an overlap */
                for (int i = 0; i < l->n; i++) {
                    if (l->t[i].unit != u) continue;
                    unsigned char* tm = (unsigned char*)calloc(l->t[i].size, 1);
                    for (int r = 0; r < N; r++) {
                        const ZeroPlan* Pr = &PR[r];
                        size_t lo, hi, a = 0;
                        zero_own_range(Pr, u, &lo, &hi);
                        size_t n = zero_tensor_overlap(Pr, i, lo, hi, &a);
                        if (!n) continue;
                        if (a < lo || a + n > hi || a < e.toff[i] || a + n > e.toff[i] + l->t[i].size) { ok_tcover = 0; continue; }
                        for (size_t x = a; x < a + n; x++) { tm[x - e.toff[i]]++; if (!is_t[x]) ok_pad = 0; }
                    }
                    for (size_t x = 0; x < l->t[i].size; x++) if (tm[x] != 1) ok_tcover = 0;

                    /* the optimizer's range: every element once per rank at stage 0
                       (replicated), exactly once over ranks at stages 1-3 */
                    memset(tm, 0, l->t[i].size);
                    for (int r = 0; r < N; r++) {
                        const ZeroPlan* Pr = &PR[r];
                        size_t lo, hi, a = 0;
                        zero_update_range(Pr, u, &lo, &hi);
                        size_t n = zero_tensor_overlap(Pr, i, lo, hi, &a);
                        if (!n) continue;
                        if (a < lo || a + n > hi || a < e.toff[i] || a + n > e.toff[i] + l->t[i].size) { ok_upd = 0; continue; }
                        for (size_t x = a; x < a + n; x++) { tm[x - e.toff[i]]++; if (!is_t[x]) ok_pad = 0; }
                    }
                    unsigned want = stage == 0 ? (unsigned)N : 1u;
                    for (size_t x = 0; x < l->t[i].size; x++) if (tm[x] != want) ok_upd = 0;
                    free(tm);
                }
                free(mark); free(is_t);
            }
            CHECK(ok_cover, "N=%d stage %d: own ranges cover each unit exactly once", N, stage);
            CHECK(ok_tcover, "N=%d stage %d: tensor elements covered exactly once by own-range overlaps", N, stage);
            CHECK(ok_pad, "N=%d stage %d: a padding element appeared inside a tensor overlap", N, stage);
            CHECK(ok_upd, "N=%d stage %d: update ranges cover tensors %s", N, stage, stage ? "once over ranks" : "fully on every rank");

            /* FULL / SHARDED per stage, held elements, held ranges, index maps */
            for (int b = ZB_PARAMS; b <= ZB_OPT; b++) {
                int want_full = b == ZB_PARAMS ? stage < 3 : b == ZB_GRADS ? stage < 2 : stage < 1;
                CHECK(zero_is_full(&P, b) == want_full, "N=%d stage %d buffer %d: full=%d, expected %d", N, stage, b, zero_is_full(&P, b), want_full);
                CHECK(zero_held_elements(&P, b) == (want_full ? e.full : e.sharded), "N=%d stage %d buffer %d: held elements", N, stage, b);
                int ok_idx = 1, ok_held = 1;
                if (want_full) {
                    unsigned char* m = (unsigned char*)calloc(e.full, 1);
                    const ZeroPlan* Pr = &PR[N - 1];
                    for (int u = 0; u < l->num_units; u++) {
                        size_t lo, hi;
                        zero_held_range(Pr, b, u, &lo, &hi);
                        if (lo != 0 || hi != e.upadded[u]) ok_held = 0;
                        for (size_t x = 0; x < e.upadded[u]; x++) {
                            size_t k = zero_index(Pr, b, u, x);
                            if (k >= e.full || k != e.uoff[u] + x) { ok_idx = 0; continue; }
                            m[k]++;
                        }
                    }
                    for (size_t k = 0; k < e.full; k++) if (m[k] != 1) ok_idx = 0;
                    free(m);
                } else {
                    unsigned char* m = (unsigned char*)calloc(e.sharded, 1);
                    for (int r = 0; r < N; r++) {
                        const ZeroPlan* Pr = &PR[r];
                        memset(m, 0, e.sharded);
                        for (int u = 0; u < l->num_units; u++) {
                            size_t lo, hi, olo, ohi;
                            zero_held_range(Pr, b, u, &lo, &hi);
                            zero_own_range(Pr, u, &olo, &ohi);
                            if (lo != olo || hi != ohi) ok_held = 0;
                            for (size_t x = olo; x < ohi; x++) {
                                size_t k = zero_index(Pr, b, u, x);
                                if (k >= e.sharded || k != e.usoff[u] + (x - (size_t)r * e.ushard[u])) { ok_idx = 0; continue; }
                                m[k]++;
                            }
                        }
                        for (size_t k = 0; k < e.sharded; k++) if (m[k] != 1) ok_idx = 0;
                    }
                    free(m);
                }
                CHECK(ok_held, "N=%d stage %d buffer %d: held range", N, stage, b);
                CHECK(ok_idx, "N=%d stage %d buffer %d: zero_index is not a bijection onto [0, %s)", N, stage, b,
                      want_full ? "padded_parameters" : "shard_parameters");
            }
            for (int r = 0; r < N; r++) zero_plan_free(&PR[r]);
            free(PR);
            zero_plan_free(&P);
        }
    }
    check_group_end(name);
}

/* ------------------------------------------------------------------------ */
/* 2. predicted memory per stage                                             */

static void test_memory(const TList* l) {
    static const int Ns[] = {1, 2, 3, 4, 5, 8, 64};
    static const int prefetches[] = {0, 1, 2, 7};
    char name[128];
    snprintf(name, sizeof(name), "predicted memory: %s", l->name);
    check_group_begin();
    int L = l->num_units - 1;
    for (size_t ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++) {
        int N = Ns[ni];
        Expect e;
        expect_layout(l, N, &e);
        unsigned long long P_ = e.full, S_ = e.sharded;
        for (int pb = 2; pb <= 4; pb += 2)
        for (int stage = 0; stage <= 3; stage++)
        for (int reshard = 0; reshard <= 1; reshard++)
        for (size_t pi = 0; pi < sizeof(prefetches) / sizeof(prefetches[0]); pi++) {
            int pf = prefetches[pi];
            unsigned long long p = (unsigned long long)pb, g = p;   /* grads in the param dtype */
            char err[ERRLEN] = "";
            ZeroPlan P;
            int rc = plan_init_simple(&P, l, stage, N, N - 1, pb, pb, reshard, pf, 1, err);
            CHECK(rc == 0, "init failed: %s", err);
            if (rc) { zero_plan_free(&P); continue; }
            Ledger Lg;
            memset(&Lg, 0, sizeof(Lg));
            zero_predict_memory(&P, 12345ULL, &Lg);
            /* persistent: stage 0 all full; 1 opt /N; 2 grads /N too; 3 params /N too */
            unsigned long long ep = p * (stage >= 3 ? S_ : P_);
            unsigned long long eg = g * (stage >= 2 ? S_ : P_);
            unsigned long long eo = stage >= 1 ? S_ : P_;
            unsigned long long emaster = pb == 2 ? 4 * eo : 0;
            /* transients */
            int slots = 0;
            if (stage == 3 && L > 0) slots = reshard ? (1 + pf < L ? 1 + pf : L) : L;
            unsigned long long egath = stage == 3 ? p * (e.root + (unsigned long long)slots * e.maxblk) : 0;
            unsigned long long eug = stage >= 2 ? g * (e.root + e.maxblk) : 0;
            /* reduce-scatters and all-gathers run in place: no scratch at any stage */
            unsigned long long escr = 0;
            const char* ctx = "N=%d p=%d stage %d reshard %d prefetch %d: %s %llu, expected %llu";
            CHECK(Lg.predicted[MEM_PARAMS] == ep, ctx, N, pb, stage, reshard, pf, mem_names[MEM_PARAMS], Lg.predicted[MEM_PARAMS], ep);
            CHECK(Lg.predicted[MEM_GRADS] == eg, ctx, N, pb, stage, reshard, pf, mem_names[MEM_GRADS], Lg.predicted[MEM_GRADS], eg);
            CHECK(Lg.predicted[MEM_MASTER] == emaster, ctx, N, pb, stage, reshard, pf, mem_names[MEM_MASTER], Lg.predicted[MEM_MASTER], emaster);
            CHECK(Lg.predicted[MEM_ADAM_M] == 4 * eo, ctx, N, pb, stage, reshard, pf, mem_names[MEM_ADAM_M], Lg.predicted[MEM_ADAM_M], 4 * eo);
            CHECK(Lg.predicted[MEM_ADAM_V] == 4 * eo, ctx, N, pb, stage, reshard, pf, mem_names[MEM_ADAM_V], Lg.predicted[MEM_ADAM_V], 4 * eo);
            CHECK(Lg.predicted[MEM_ACTIVATIONS] == 12345ULL, ctx, N, pb, stage, reshard, pf, mem_names[MEM_ACTIVATIONS], Lg.predicted[MEM_ACTIVATIONS], 12345ULL);
            CHECK(P.num_slots == slots + (stage == 3), "N=%d stage %d reshard %d prefetch %d: num_slots %d, expected %d (the root's + blocks')", N, stage, reshard, pf, P.num_slots, slots + (stage == 3));
            CHECK(Lg.predicted[MEM_GATHERED] == egath, ctx, N, pb, stage, reshard, pf, mem_names[MEM_GATHERED], Lg.predicted[MEM_GATHERED], egath);
            CHECK(Lg.predicted[MEM_UNIT_GRADS] == eug, ctx, N, pb, stage, reshard, pf, mem_names[MEM_UNIT_GRADS], Lg.predicted[MEM_UNIT_GRADS], eug);
            CHECK(Lg.predicted[MEM_COMM_SCRATCH] == escr, ctx, N, pb, stage, reshard, pf, mem_names[MEM_COMM_SCRATCH], Lg.predicted[MEM_COMM_SCRATCH], escr);
            /* 16 bytes per parameter of the padded buffer, for fp32 (4+4+8) and
               bf16 (2+2+12): at stage 0 per rank, at stage 3 over the N ranks */
            unsigned long long ms = ledger_model_states(Lg.predicted);
            if (stage == 0) CHECK(ms == 16ULL * P_, "N=%d p=%d stage 0: model states %llu, expected 16 * %llu", N, pb, ms, P_);
            if (stage == 3) CHECK(ms == 16ULL * S_, "N=%d p=%d stage 3: model states %llu, expected 16 * %llu", N, pb, ms, S_);
            zero_plan_free(&P);
        }
    }
    check_group_end(name);
}

/* ------------------------------------------------------------------------ */
/* 3. predicted traffic per optimizer step                                   */

static void test_traffic(const TList* l) {
    static const int Ns[] = {1, 2, 3, 4, 5, 8, 64};
    char name[128];
    snprintf(name, sizeof(name), "predicted traffic: %s", l->name);
    check_group_begin();
    for (size_t ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++) {
        int N = Ns[ni];
        Expect e;
        expect_layout(l, N, &e);
        unsigned long long P_ = e.full, root = e.root;
        for (int pb = 2; pb <= 4; pb += 2)
        for (int A = 1; A <= 2; A++)
        for (int stage = 0; stage <= 3; stage++)
        for (int reshard = 0; reshard <= 1; reshard++) {
            unsigned long long p = (unsigned long long)pb, g = p, a = (unsigned long long)A;
            char err[ERRLEN] = "";
            ZeroPlan P;
            int rc = plan_init_simple(&P, l, stage, N, 0, pb, pb, reshard, 1, A, err);
            CHECK(rc == 0, "init failed: %s", err);
            if (rc) { zero_plan_free(&P); continue; }
            unsigned long long h[COLL_NUM] = {7, 7, 7, 7, 7};
            zero_predict_traffic(&P, h);
            unsigned long long ar = 0, rs = 0, ag = 0;   /* all-reduce, reduce-scatter, all-gather */
            if (N > 1) {
                if (stage == 0) { rs = g * P_; ag = g * P_; }  /* all-reduce = reduce-scatter + all-gather */
                if (stage == 1) { rs = g * P_; ag = p * P_; }
                if (stage == 2) { rs = a * g * P_; ag = p * P_; }
                if (stage == 3) { rs = a * g * P_; ag = p * root + a * (reshard ? 2 : 1) * p * (P_ - root); }
            }
            CHECK(h[0] == ar && h[1] == rs && h[2] == ag && h[3] == 16 && h[COLL_EMB_GATHER] == 0,
                  "N=%d p=%d A=%d stage %d reshard %d: handed {%llu, %llu, %llu, %llu}, expected {%llu, %llu, %llu, 16}",
                  N, pb, A, stage, reshard, h[0], h[1], h[2], h[3], ar, rs, ag);
            zero_plan_free(&P);
        }
    }
    check_group_end(name);
}

/* ------------------------------------------------------------------------ */
/* 3b. unit classes: slots, unit-grad buffers and traffic per gathering mode  */

/* Units 0 | 1 2 | 3 4 5 of a list with 6 units in three classes: KEEP_STEP
   (uses 1), a class of mode m1 with `uses` 3, and blocks of mode m2 (uses
   2); predictions checked against sums written out here. */
static void test_classes(void) {
    check_group_begin();
    TList l;
    memset(&l, 0, sizeof(l)); l.name = "classes";
    tl_add(&l, "root", 0, 40, 1); tl_add(&l, "c0", 1, 512, 1); tl_add(&l, "c1", 2, 300, 1);
    tl_add(&l, "b0", 3, 100, 1); tl_add(&l, "b1", 4, 130, 1); tl_add(&l, "b2", 5, 70, 0);
    static const int Ns[] = {1, 2, 3, 4, 8};
    for (size_t ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++)
    for (int m1 = ZERO_KEEP_STEP; m1 <= ZERO_RESHARD; m1 += 2)          /* KEEP_STEP or RESHARD */
    for (int m2 = ZERO_KEEP_MICRO; m2 <= ZERO_RESHARD; m2++)
    for (int pf = 0; pf <= 3; pf++)
    for (int ov = 0; ov <= 1; ov++)
    for (int A = 1; A <= 2; A++) {
        int N = Ns[ni];
        Expect e;
        expect_layout(&l, N, &e);
        char err[ERRLEN] = "";
        ZeroPlan P;
        int uc[6] = {0, 1, 1, 2, 2, 2};
        ZeroSpec sp = spec_of(l.t, l.n, l.num_units, 3, N, 0, 2, 2, 1, pf, A);
        sp.overlap = ov;
        sp.emb_gather_bytes = 1000;
        sp.num_classes = 3; sp.unit_class = uc;
        sp.classes[0] = (ZeroClassSpec){"root", ZERO_KEEP_STEP, 1};
        sp.classes[1] = (ZeroClassSpec){"chunks", m1, 3};
        sp.classes[2] = (ZeroClassSpec){"blocks", m2, 2};
        int rc = zero_plan_init(&P, &sp, err, ERRLEN);
        CHECK(rc == 0, "init with classes: %s", err);
        if (rc) continue;
        unsigned long long p = 2, g = 2, a = (unsigned long long)A;
        unsigned long long mx1 = e.upadded[1] > e.upadded[2] ? e.upadded[1] : e.upadded[2];
        unsigned long long mx2 = e.upadded[3];
        if (e.upadded[4] > mx2) mx2 = e.upadded[4];
        if (e.upadded[5] > mx2) mx2 = e.upadded[5];
        int s1 = m1 == ZERO_RESHARD ? (1 + pf < 2 ? 1 + pf : 2) : 2;
        int s2 = m2 == ZERO_RESHARD ? (1 + pf < 3 ? 1 + pf : 3) : 3;
        CHECK(P.num_slots == 1 + s1 + s2, "N=%d m1 %d m2 %d pf %d: slots %d, expected %d", N, m1, m2, pf, P.num_slots, 1 + s1 + s2);
        CHECK(P.units[4].cls == 2 && P.units[4].idx == 1 && P.units[2].idx == 1 && P.units[0].idx == 0, "class indices");
        Ledger Lg;
        zero_predict_memory(&P, 0, &Lg);
        unsigned long long gath = p * (e.upadded[0] + (unsigned long long)s1 * mx1 + (unsigned long long)s2 * mx2);
        unsigned long long ug = g * (e.upadded[0] + (ov ? 2 : 1) * (mx1 + mx2));
        CHECK(Lg.predicted[MEM_GATHERED] == gath, "N=%d m1 %d m2 %d pf %d: gathered %llu, expected %llu", N, m1, m2, pf, Lg.predicted[MEM_GATHERED], gath);
        CHECK(Lg.predicted[MEM_UNIT_GRADS] == ug, "N=%d ov %d: unit grads %llu, expected %llu", N, ov, Lg.predicted[MEM_UNIT_GRADS], ug);
        unsigned long long h[COLL_NUM];
        zero_predict_traffic(&P, h);
        unsigned long long c1 = e.upadded[1] + e.upadded[2], c2 = e.upadded[3] + e.upadded[4] + e.upadded[5];
        unsigned long long ag = p * e.upadded[0] + p * c1 * (m1 == ZERO_RESHARD ? 3 * a : 1)
                              + p * c2 * (m2 == ZERO_RESHARD ? 2 * a : a);
        if (N == 1) ag = 0;
        CHECK(h[COLL_ALL_GATHER] == ag, "N=%d m1 %d m2 %d A %d: all-gather %llu, expected %llu", N, m1, m2, A, h[COLL_ALL_GATHER], ag);
        CHECK(h[COLL_REDUCE_SCATTER] == (N > 1 ? a * g * e.full : 0), "N=%d: reduce-scatter", N);
        CHECK(h[COLL_EMB_GATHER] == (N > 1 ? a * 1000 : 0), "N=%d A=%d: embedding rows %llu", N, A, h[COLL_EMB_GATHER]);
        zero_plan_free(&P);
    }
    check_group_end("unit classes: slots, grad buffers, traffic by mode");
}

/* ------------------------------------------------------------------------ */
/* 4. impossible configurations                                              */

static void expect_error(const TList* l, int n, int num_units, int stage, int N, int rank, int pb, int prefetch, int A,
                         const char* what, const char* word) {
    char err[ERRLEN] = "";
    ZeroPlan P;
    ZeroSpec sp = spec_of(l->t, n, num_units, stage, N, rank, pb, pb, 1, prefetch, A);
    int rc = zero_plan_init(&P, &sp, err, ERRLEN);
    CHECK(rc == 1, "%s: returned %d, expected 1", what, rc);
    CHECK(err[0] != '\0', "%s: no message", what);
    CHECK(strstr(err, word) != NULL, "%s: message '%s' does not mention '%s'", what, err, word);
    zero_plan_free(&P);   /* safe: the plan is zeroed or partly built */
}

static void test_errors(void) {
    check_group_begin();
    TList ok;
    memset(&ok, 0, sizeof(ok)); ok.name = "ok";
    tl_add(&ok, "a", 0, 7, 1); tl_add(&ok, "b", 1, 33, 0); tl_add(&ok, "c", 2, 1, 0);
    expect_error(&ok, ok.n, ok.num_units, 5, 2, 0, 2, 1, 1, "stage 5", "zero_stage");
    expect_error(&ok, ok.n, ok.num_units, 4, 2, 0, 2, 1, 1, "stage 4", "zero_stage");
    expect_error(&ok, ok.n, ok.num_units, -1, 2, 0, 2, 1, 1, "stage -1", "zero_stage");
    expect_error(&ok, ok.n, ok.num_units, 1, 0, 0, 2, 1, 1, "N = 0", "rank");
    expect_error(&ok, ok.n, ok.num_units, 1, -3, 0, 2, 1, 1, "N = -3", "rank");
    expect_error(&ok, ok.n, ok.num_units, 1, 4, 4, 2, 1, 1, "rank = N", "rank");
    expect_error(&ok, ok.n, ok.num_units, 1, 4, 9, 2, 1, 1, "rank > N", "rank");
    expect_error(&ok, ok.n, ok.num_units, 1, 4, -1, 2, 1, 1, "rank -1", "rank");
    expect_error(&ok, ok.n, ok.num_units, 3, 2, 0, 2, -1, 1, "prefetch -1", "prefetch");
    expect_error(&ok, ok.n, ok.num_units, 1, 2, 0, 3, 1, 1, "param_bytes 3", "param_bytes");
    expect_error(&ok, ok.n, ok.num_units, 1, 2, 0, 2, 1, 0, "grad_accum_steps 0", "grad_accum");
    expect_error(&ok, 0, ok.num_units, 1, 2, 0, 2, 1, 1, "no tensors", "tensors");
    expect_error(&ok, ok.n, 0, 1, 2, 0, 2, 1, 1, "0 units", "units");
    expect_error(&ok, ok.n, 2, 1, 2, 0, 2, 1, 1, "tensor unit beyond num_units", "out of order");

    TList z;
    memset(&z, 0, sizeof(z)); z.name = "size0";
    tl_add(&z, "a", 0, 7, 1); tl_add(&z, "empty", 1, 0, 0); tl_add(&z, "c", 1, 3, 0);
    expect_error(&z, z.n, z.num_units, 0, 1, 0, 4, 0, 1, "tensor of size 0", "size 0");
    expect_error(&z, z.n, z.num_units, 0, 1, 0, 4, 0, 1, "tensor of size 0 names it", "empty");

    TList o;
    memset(&o, 0, sizeof(o)); o.name = "order";
    tl_add(&o, "a", 0, 7, 1); tl_add(&o, "b", 2, 5, 0); tl_add(&o, "late", 1, 3, 0);
    expect_error(&o, o.n, o.num_units, 1, 2, 1, 2, 1, 1, "tensors out of unit order", "out of order");
    expect_error(&o, o.n, o.num_units, 1, 2, 1, 2, 1, 1, "tensors out of order names it", "late");

    TList neg;
    memset(&neg, 0, sizeof(neg)); neg.name = "negative unit";
    tl_add(&neg, "a", 0, 7, 1);
    neg.t[0].unit = -1; neg.num_units = 1;
    expect_error(&neg, neg.n, neg.num_units, 1, 2, 0, 2, 1, 1, "negative unit", "out of order");

    /* the valid neighbours of those configurations are accepted */
    char err[ERRLEN] = "";
    ZeroPlan P;
    ZeroSpec sp = spec_of(ok.t, ok.n, ok.num_units, 3, 4, 3, 2, 2, 1, 0, 1);
    int rc = zero_plan_init(&P, &sp, err, ERRLEN);
    CHECK(rc == 0, "stage 3, rank 3 of 4, prefetch 0: rejected: %s", err);
    zero_plan_free(&P);
    sp = spec_of(ok.t, ok.n, ok.num_units, 0, 1, 0, 4, 4, 0, 0, 1);
    rc = zero_plan_init(&P, &sp, err, ERRLEN);
    CHECK(rc == 0, "stage 0, 1 rank, fp32: rejected: %s", err);
    zero_plan_free(&P);
    check_group_end("impossible configurations rejected with a message");
}

/* ------------------------------------------------------------------------ */
/* 5. the estimator (closed forms of the ZeRO paper)                         */

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-12; }

/* Does stage s fit on n ranks? exact integers: bytes per rank <= mem  <=>
   rep * n + shard <= mem * n (rep = replicated bytes, shard = sharded). */
static int fits_exact(int s, unsigned long long psi, unsigned long long p, unsigned long long g, unsigned long long k,
                      unsigned long long mem, unsigned long long n) {
    unsigned long long rep = s == 0 ? (p + g + k) * psi : s == 1 ? (p + g) * psi : s == 2 ? p * psi : 0;
    unsigned long long sh = s == 0 ? 0 : s == 1 ? k * psi : s == 2 ? (g + k) * psi : (p + g + k) * psi;
    return rep * n + sh <= mem * n;
}

static void test_estimator(void) {
    check_group_begin();
    const double GB = 1e9;
    /* 70B on 64 ranks, mixed precision (2 + 2 + 12), the paper's figure 1 */
    double psi = 70e9, N = 64;
    double want70[4] = {(2 + 2 + 12) * 70.0,                 /* 1120     */
                        (2 + 2) * 70.0 + 12 * 70.0 / 64,     /* 293.125  */
                        2 * 70.0 + (2 + 12) * 70.0 / 64,     /* 155.3125 */
                        (2 + 2 + 12) * 70.0 / 64};           /* 17.5     */
    double lit70[4] = {1120.0, 293.125, 155.3125, 17.5};
    for (int s = 0; s < 4; s++) {
        double b = zero_formula_bytes(s, psi, N, 2, 2, 12) / GB;
        CHECK(close_to(want70[s], lit70[s]), "test arithmetic: stage %d %.6f vs %.6f", s, want70[s], lit70[s]);
        CHECK(close_to(b, want70[s]), "70e9 on 64, stage %d: %.6f GB, expected %.6f", s, b, want70[s]);
    }
    /* 30B on 32 ranks */
    double b1 = zero_formula_bytes(1, 30e9, 32, 2, 2, 12) / GB, b2 = zero_formula_bytes(2, 30e9, 32, 2, 2, 12) / GB;
    CHECK(close_to(b1, 4 * 30.0 + 12 * 30.0 / 32) && close_to(b1, 131.25), "30e9 on 32, stage 1: %.6f, expected 131.25", b1);
    CHECK(close_to(b2, 2 * 30.0 + 14 * 30.0 / 32) && close_to(b2, 73.125), "30e9 on 32, stage 2: %.6f, expected 73.125", b2);
    /* 13B at stage 0: fp32 (4+4+8) and bf16 (2+2+12) both 16 bytes/param = 208 GB */
    double f32 = zero_formula_bytes(0, 13e9, 8, 4, 4, 8) / GB, b16 = zero_formula_bytes(0, 13e9, 8, 2, 2, 12) / GB;
    CHECK(close_to(f32, 16 * 13.0) && close_to(f32, 208.0), "13e9 fp32 stage 0: %.6f, expected 208", f32);
    CHECK(close_to(b16, 16 * 13.0) && close_to(b16, 208.0), "13e9 bf16 stage 0: %.6f, expected 208", b16);
    /* stage 0 does not depend on N */
    CHECK(close_to(zero_formula_bytes(0, 13e9, 1, 2, 2, 12), zero_formula_bytes(0, 13e9, 1000, 2, 2, 12)), "stage 0 depends on N");
    /* traffic: 2 Psi for stages 0-2, 3 Psi for stage 3 */
    double wt[4] = {2, 2, 2, 3};
    for (int s = 0; s < 4; s++) CHECK(zero_formula_traffic_psi(s) == wt[s], "traffic stage %d: %.1f, expected %.1f", s, zero_formula_traffic_psi(s), wt[s]);

    /* min ranks: 70B bf16 in 80 GB: stages 0-2 never (stage 2 alone keeps
       p Psi = 140 GB), stage 3 ceil(1120 / 80) = 14 */
    unsigned long long P70 = 70000000000ULL, M80 = 80000000000ULL;
    CHECK(zero_min_ranks(0, P70, 2, 2, 12, M80) == 0, "70e9 stage 0 in 80 GB: %llu, expected 0 (never)", zero_min_ranks(0, P70, 2, 2, 12, M80));
    CHECK(zero_min_ranks(1, P70, 2, 2, 12, M80) == 0, "70e9 stage 1 in 80 GB: %llu, expected 0 (never)", zero_min_ranks(1, P70, 2, 2, 12, M80));
    CHECK(zero_min_ranks(2, P70, 2, 2, 12, M80) == 0, "70e9 stage 2 in 80 GB: %llu, expected 0 (never)", zero_min_ranks(2, P70, 2, 2, 12, M80));
    CHECK(zero_min_ranks(3, P70, 2, 2, 12, M80) == 14, "70e9 stage 3 in 80 GB: %llu, expected 14", zero_min_ranks(3, P70, 2, 2, 12, M80));
    CHECK(!fits_exact(3, P70, 2, 2, 12, M80, 13) && fits_exact(3, P70, 2, 2, 12, M80, 14), "test arithmetic: 13 ranks must not fit, 14 must");
    /* 30B in 80 GB: stage 2 ceil(14*30 / (80 - 60)) = 21, stage 3 ceil(480/80) = 6 */
    unsigned long long P30 = 30000000000ULL;
    CHECK(zero_min_ranks(2, P30, 2, 2, 12, M80) == 21, "30e9 stage 2 in 80 GB: %llu, expected 21", zero_min_ranks(2, P30, 2, 2, 12, M80));
    CHECK(zero_min_ranks(3, P30, 2, 2, 12, M80) == 6, "30e9 stage 3 in 80 GB: %llu, expected 6", zero_min_ranks(3, P30, 2, 2, 12, M80));
    /* stage 0: 1 when it fits, else never; boundaries exact */
    CHECK(zero_min_ranks(0, 5, 2, 2, 12, 80) == 1, "5 params stage 0 in 80 B: expected 1");
    CHECK(zero_min_ranks(0, 5, 2, 2, 12, 79) == 0, "5 params stage 0 in 79 B: expected never");
    CHECK(zero_min_ranks(3, 5, 2, 2, 12, 10) == 8, "5 params stage 3 in 10 B: %llu, expected 8 (80/8 = 10 exactly)", zero_min_ranks(3, 5, 2, 2, 12, 10));
    CHECK(zero_min_ranks(3, 5, 2, 2, 12, 0) == 0, "stage 3 in 0 bytes: expected never");
    CHECK(zero_min_ranks(1, 5, 2, 2, 12, 20) == 0, "stage 1 with replicated part == memory: expected never");
    /* sweep: the answer is the smallest n that fits (exact integer check) */
    int ok = 1;
    for (int s = 0; s < 4; s++)
        for (unsigned long long psi_ = 1; psi_ <= 40; psi_ += 3)
            for (unsigned long long mem = 0; mem <= 700; mem += 7)
                for (int dt = 0; dt < 2; dt++) {
                    unsigned long long p = dt ? 4 : 2, g = p, k = dt ? 8 : 12;
                    unsigned long long n = zero_min_ranks(s, psi_, p, g, k, mem);
                    unsigned long long smallest = 0;
                    for (unsigned long long t = 1; t <= 100000 && !smallest; t++) if (fits_exact(s, psi_, p, g, k, mem, t)) smallest = t;
                    if (n != smallest) {
                        ok = 0;
                        CHECK(0, "min ranks stage %d psi %llu mem %llu p %llu: %llu, expected %llu", s, psi_, mem, p, n, smallest);
                    }
                }
    CHECK(ok, "zero_min_ranks == smallest fitting rank count over a sweep");
    check_group_end("estimator: ZeRO paper figures, min ranks, traffic");
}

/* ------------------------------------------------------------------------ */
/* 6. the offloaded optimizer: tiers, streaming buffers, bytes between tiers */

static void test_offload(const TList* l) {
    static const int Ns[] = {1, 2, 3, 4, 8};
    char name[128];
    snprintf(name, sizeof(name), "offload tiers and traffic: %s", l->name);
    check_group_begin();
    for (size_t ni = 0; ni < sizeof(Ns) / sizeof(Ns[0]); ni++) {
        int N = Ns[ni];
        Expect e;
        expect_layout(l, N, &e);
        unsigned long long S_ = e.sharded, MS = e.maxshard;
        for (int pb = 2; pb <= 4; pb += 2)
        for (int stage = 1; stage <= 3; stage++)
        for (int mode = OFFLOAD_NONE; mode <= OFFLOAD_DISK; mode++)
        for (int staging = 0; staging <= 1; staging++) {
            if (mode == OFFLOAD_NONE && staging) continue;
            char err[ERRLEN] = "";
            ZeroPlan P;
            ZeroSpec sp = spec_of(l->t, l->n, l->num_units, stage, N, N - 1, pb, pb, 1, 1, 1);
            ZeroPlan Q;                               /* the same plan without offload */
            int rc = zero_plan_init(&Q, &sp, err, ERRLEN);
            CHECK(rc == 0, "init failed: %s", err);
            if (rc) { zero_plan_free(&Q); continue; }
            sp.offload = mode; sp.offload_staging = staging;
            rc = zero_plan_init(&P, &sp, err, ERRLEN);
            CHECK(rc == 0, "init failed: %s", err);
            if (rc) { zero_plan_free(&P); zero_plan_free(&Q); continue; }
            Ledger A, B;
            zero_predict_memory(&P, 777ULL, &A);
            zero_predict_memory(&Q, 777ULL, &B);
            zero_plan_free(&Q);
            unsigned long long p = (unsigned long long)pb, g = p;
            int nopt = pb == 2 ? 3 : 2;                /* master only when p < 4 */
            unsigned long long emaster = pb == 2 ? 4 * S_ : 0, emv = 4 * S_;
            const char* ctx = "N=%d p=%d stage %d mode %d staging %d: %s %llu, expected %llu";
            unsigned long long want[3][3] = {{0}};    /* [tier: memory, host, disk][master, m, v] */
            int tier = mode == OFFLOAD_NONE ? 0 : mode == OFFLOAD_HOST ? 1 : 2;
            want[tier][0] = emaster; want[tier][1] = emv; want[tier][2] = emv;
            int cats[3] = {MEM_MASTER, MEM_ADAM_M, MEM_ADAM_V};
            for (int i = 0; i < 3; i++) {
                int c = cats[i];
                CHECK(A.predicted[c] == want[0][i], ctx, N, pb, stage, mode, staging, "memory", A.predicted[c], want[0][i]);
                CHECK(A.predicted_host[c] == want[1][i], ctx, N, pb, stage, mode, staging, "host", A.predicted_host[c], want[1][i]);
                CHECK(A.predicted_disk[c] == want[2][i], ctx, N, pb, stage, mode, staging, "disk", A.predicted_disk[c], want[2][i]);
            }
            /* two streaming buffers of one unit's [master | m | v] shard (disk) */
            unsigned long long ebuf = mode == OFFLOAD_DISK ? 2ULL * (unsigned long long)nopt * 4ULL * MS : 0;
            CHECK((staging ? A.predicted_host[MEM_OFFLOAD_BUF] : A.predicted[MEM_OFFLOAD_BUF]) == ebuf, ctx, N, pb, stage, mode, staging,
                  "streaming buffers", staging ? A.predicted_host[MEM_OFFLOAD_BUF] : A.predicted[MEM_OFFLOAD_BUF], ebuf);
            CHECK((staging ? A.predicted[MEM_OFFLOAD_BUF] : A.predicted_host[MEM_OFFLOAD_BUF]) == 0, "N=%d: streaming buffers in the wrong tier", N);
            unsigned long long estg = staging ? (g + p) * MS : 0;
            CHECK(A.predicted_host[MEM_OFFLOAD_STAGING] == estg, ctx, N, pb, stage, mode, staging, "staging", A.predicted_host[MEM_OFFLOAD_STAGING], estg);
            /* every other category as without offload */
            int same = 1;
            for (int c = 0; c < MEM_NUM; c++)
                if (c != MEM_MASTER && c != MEM_ADAM_M && c != MEM_ADAM_V && c != MEM_OFFLOAD_BUF && A.predicted[c] != B.predicted[c]) same = 0;
            CHECK(same, "N=%d p=%d stage %d mode %d: a category outside the optimizer changed", N, pb, stage, mode);
            /* bytes between tiers per step: disk 4 x nopt x own shard each way
               (fp32: 8 Psi/N, bf16: 12 Psi/N); staging g (+p without master)
               Psi/N down, p Psi/N up */
            unsigned long long t[OFFL_NUM];
            zero_predict_offload_traffic(&P, t);
            unsigned long long edisk = mode == OFFLOAD_DISK ? 4ULL * (unsigned long long)nopt * S_ : 0;
            unsigned long long eh = staging ? g * S_ + (pb == 2 ? 0 : p * S_) : 0, ed = staging ? p * S_ : 0;
            CHECK(t[OFFL_DISK_READ] == edisk && t[OFFL_DISK_WRITE] == edisk, ctx, N, pb, stage, mode, staging, "disk read/write per step", t[OFFL_DISK_READ], edisk);
            CHECK(t[OFFL_TO_HOST] == eh, ctx, N, pb, stage, mode, staging, "to host per step", t[OFFL_TO_HOST], eh);
            CHECK(t[OFFL_TO_BACKEND] == ed, ctx, N, pb, stage, mode, staging, "to device per step", t[OFFL_TO_BACKEND], ed);
            if (mode == OFFLOAD_DISK)
                CHECK(edisk == (pb == 2 ? 12ULL : 8ULL) * S_, "N=%d p=%d: disk bytes per step %llu, expected %s x %llu", N, pb, edisk, pb == 2 ? "12" : "8", S_);
            zero_plan_free(&P);
        }
    }
    check_group_end(name);
}

static void test_offload_estimator(void) {
    check_group_begin();
    const double GB = 1e9;
    /* 70B, bf16 (2+2+12), 8 ranks, optimizer offloaded: device keeps
       stage 1 (2+2) x 70 = 280, stage 2 2 x 70 + 2 x 70/8 = 157.5, stage 3
       (2+2) x 70/8 = 35 GB; the host or disk 12 x 70/8 = 105 GB per rank,
       read and written once per step with disk: 210 GB */
    double d1 = zero_formula_offload_device_bytes(1, 70e9, 8, 2, 2) / GB;
    double d2 = zero_formula_offload_device_bytes(2, 70e9, 8, 2, 2) / GB;
    double d3 = zero_formula_offload_device_bytes(3, 70e9, 8, 2, 2) / GB;
    double o = zero_formula_offload_bytes(70e9, 8, 12) / GB;
    CHECK(close_to(d1, 280.0), "70e9 on 8, stage 1 offloaded: %.6f GB on the device, expected 280", d1);
    CHECK(close_to(d2, 157.5), "70e9 on 8, stage 2 offloaded: %.6f GB on the device, expected 157.5", d2);
    CHECK(close_to(d3, 35.0), "70e9 on 8, stage 3 offloaded: %.6f GB on the device, expected 35", d3);
    CHECK(close_to(o, 105.0), "70e9 on 8: %.6f GB offloaded per rank, expected 105", o);
    /* device + offloaded = the stage's formula with the optimizer (nothing lost) */
    double s3 = zero_formula_bytes(3, 70e9, 8, 2, 2, 12) / GB;
    CHECK(close_to(d3 + o, s3) && close_to(s3, 140.0), "stage 3: 35 + 105 = %.6f, expected 140", d3 + o);
    /* fp32 (4+4+8), 70B on 64: stage 3 (4+4) x 70/64 = 8.75 GB, offloaded 8 x 70/64 = 8.75 */
    CHECK(close_to(zero_formula_offload_device_bytes(3, 70e9, 64, 4, 4) / GB, 8.75), "fp32 70e9 on 64 stage 3 offloaded: expected 8.75 GB");
    CHECK(close_to(zero_formula_offload_bytes(70e9, 64, 8) / GB, 8.75), "fp32 70e9 on 64: expected 8.75 GB offloaded");
    /* min ranks whose device fits 80 GB (k = 0): 70B bf16 stage 3: ceil(280/80) = 4
       (3 ranks: 93.3 GB); stages 1-2 never (280, 140 GB replicated); fp32
       stage 3: ceil(560/80) = 7; 30B bf16 stage 2: 60 + 60/N <= 80 -> N >= 3 */
    unsigned long long P70 = 70000000000ULL, P30 = 30000000000ULL, M80 = 80000000000ULL;
    CHECK(zero_min_ranks(3, P70, 2, 2, 0, M80) == 4, "70e9 stage 3 offloaded in 80 GB: %llu, expected 4", zero_min_ranks(3, P70, 2, 2, 0, M80));
    CHECK(zero_min_ranks(2, P70, 2, 2, 0, M80) == 0, "70e9 stage 2 offloaded: expected never");
    CHECK(zero_min_ranks(1, P70, 2, 2, 0, M80) == 0, "70e9 stage 1 offloaded: expected never");
    CHECK(zero_min_ranks(3, P70, 4, 4, 0, M80) == 7, "fp32 70e9 stage 3 offloaded: %llu, expected 7", zero_min_ranks(3, P70, 4, 4, 0, M80));
    CHECK(zero_min_ranks(2, P30, 2, 2, 0, M80) == 3, "30e9 stage 2 offloaded: %llu, expected 3", zero_min_ranks(2, P30, 2, 2, 0, M80));
    CHECK(zero_min_ranks(1, P30, 2, 2, 0, 120000000000ULL) == 1, "30e9 stage 1 offloaded in 120 GB: expected 1 ((2+2) x 30 = 120)");
    check_group_end("estimator: offloaded optimizer rows (70B on 8, fp32 on 64, min ranks)");
}

/* ------------------------------------------------------------------------ */

int main(void) {
    static TList lists[5];
    /* 1. GPT-2-like: L=3, C=96, Vp=1024, maxT=48 */
    tl_gpt2(&lists[0], "gpt2 L=3 C=96 Vp=1024 maxT=48", 3, 96, 1024, 48);
    /* 2. tiny: units with fewer elements than ranks */
    TList* t = &lists[1];
    memset(t, 0, sizeof(*t)); t->name = "tiny (units smaller than N)";
    tl_add(t, "r", 0, 1, 0); tl_add(t, "a", 1, 2, 1); tl_add(t, "b", 1, 3, 0); tl_add(t, "c", 2, 1, 0);
    /* 3. odd sizes around the alignment */
    t = &lists[2];
    memset(t, 0, sizeof(*t)); t->name = "odd sizes 7, 33, 1, 15, 16, 17, 31, 95";
    tl_add(t, "w7", 0, 7, 1); tl_add(t, "w33", 0, 33, 1); tl_add(t, "w1", 0, 1, 0);
    tl_add(t, "x15", 1, 15, 0); tl_add(t, "x16", 1, 16, 1); tl_add(t, "x17", 1, 17, 0);
    tl_add(t, "y31", 2, 31, 1); tl_add(t, "y1", 2, 1, 0);
    tl_add(t, "z95", 3, 95, 1); tl_add(t, "z7", 3, 7, 0); tl_add(t, "z33", 3, 33, 0);
    /* 4. root only (no blocks: no gathered slots) */
    t = &lists[3];
    memset(t, 0, sizeof(*t)); t->name = "root only (0 blocks)";
    tl_add(t, "emb", 0, 1000, 1); tl_add(t, "bias", 0, 3, 0);
    /* 5. blocks of different sizes (max block is not the first) */
    t = &lists[4];
    memset(t, 0, sizeof(*t)); t->name = "uneven blocks";
    tl_add(t, "r", 0, 50, 1); tl_add(t, "b1", 1, 10, 1); tl_add(t, "b2", 2, 3000, 1); tl_add(t, "b2b", 2, 5, 0);
    tl_add(t, "b3", 3, 700, 1);

    for (int i = 0; i < 5; i++) test_layout(&lists[i]);
    for (int i = 0; i < 5; i++) test_memory(&lists[i]);
    for (int i = 0; i < 5; i++) test_traffic(&lists[i]);
    test_classes();
    test_errors();
    test_estimator();
    for (int i = 0; i < 5; i++) test_offload(&lists[i]);
    test_offload_estimator();

    return check_summary();
}
