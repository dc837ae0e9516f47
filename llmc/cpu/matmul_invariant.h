/*
 * llmc/cpu/matmul_invariant.h -- --invariant 1's products on fixed tiles and
 * fixed trees (docs/design.md section 13), for matmul.h's matmul_forward and
 * matmul_backward when cpu_inv_T != 0 (common.h): a row's bits and a weight
 * gradient's sum order depend neither on B (= N/T) nor on the thread count.
 * Both programs: the transposed copy and the pairwise tree of the weight
 * gradient (cpu_inv_dweight_tree); the fp32 program's row tiles on the
 * sgemm (cpu_inv_rows_gemm); the bf16 program's on its class's path: the
 * fp32-copy path of matmul_bf16.h (cpu_inv_gemm_rows_bf16, its buffers) or
 * oneDNN's bf16 primitive in single-threaded tile plans (cpu_inv_plan,
 * cpu_inv_gemm_rows_prim; attention.h's attention_*_inv use the plans too).
 * Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_INVARIANT_H
#define LLMC_CPU_MATMUL_INVARIANT_H

#include "common.h"
#include "matmul_bf16.h"   /* the bf16 program's buffers and epilogue (empty in the fp32 program) */

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#ifdef LLMC_BF16
/* ------------------------------------------------------------------------ */
/* --invariant 1 on oneDNN's bf16 matmul primitive (the bf16 program, the
   classes whose path is the primitive: cpu_gemm_decide gives it to the
   linear layers at the level avx512_bf16 and above on every rank)

   A tile plan is one primitive of a fixed tile shape, created while
   OpenMP's nthreads is 1 (oneDNN's brgemm matmul takes its blocking and its
   split of K among threads from dnnl_get_max_threads() at creation, and the
   number of threads is part of oneDNN's primitive cache key), and run
   inside our parallel region, where oneDNN runs it on the calling thread
   alone. Its sum order is then a function of the tile's shape and layouts,
   never of B, N or the thread count: the same bits for the same tile
   whatever else runs (tests/unit/test_kernels.c checks it bit for bit).
   The operands are dense (oneDNN 2.6's brgemm matmul takes nothing else; a
   strided tile falls to its gemm:jit, which mallocs its packing buffers on
   every call), and B is in the layout the primitive asks for (format
   "any"), packed from its plain layout (strides sb) once per product, not
   once per tile (cpu_inv_plan_pack: exact, a copy; our loops for the
   BA16a64b2a layout, cpu_inv_pack_vnni / _t, else a oneDNN reorder).
   One primitive per shape is shared by the threads (a primitive is
   immutable; user scratchpad mode is thread-safe when no two executions
   share a scratchpad: oneDNN's dnnl_scratchpad_mode_t documentation), each
   thread with its own memory objects, stream and scratchpad. Plans are
   made, looked up and packed in serial code only. */
#define CPU_INV_PLANS 64
typedef struct {
    int valid, batch, M, N, K, has_bias, accumulate, f32dst;
    int pack;                        /* 1: B runs in the primitive's own layout, packed by cpu_inv_plan_pack; 0: B dense as stored */
    int vnni;                        /* the packed layout is BA16a64b2a and B's rows dense (cpu_inv_pack_vnni packs it): 1;
                                        2: that layout, B stored transposed (columns dense: cpu_inv_pack_vnni_t) */
    long long kp, np;                /* the packed B's padded dims (K, N) */
    float alpha;                     /* output scale */
    long long sa[3], sb[3], sc[3];   /* element strides (batch, row, column) of op(A) (M,K), op(B) (K,N) as stored plain, C (M,N) */
    unsigned long long used;         /* the call that last took it (not evicted while in use) */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    const dnnl_memory_desc_t* smd;   /* the scratchpad's (of pd) */
    const dnnl_memory_desc_t* bmd;   /* the packed B's (of pd) */
    size_t bbytes;                   /* bytes of a packed B */
    dnnl_primitive_desc_t rpd;       /* the reorder: B plain (strides sb) -> bmd */
    dnnl_primitive_t reorder;
    dnnl_memory_t rsrc, rdst;
    int nth;                         /* threads with memory objects */
    dnnl_memory_t* mem;              /* per thread: A, B, C, bias (or NULL), scratchpad */
} CpuInvPlan;
static struct {
    CpuInvPlan plan[CPU_INV_PLANS];
    int next;
    unsigned long long call;
    int nth;                         /* threads with a stream and a scratchpad */
    dnnl_stream_t stream[256];
    void* scratch[256];
    size_t scratch_bytes;            /* each thread's scratchpad (bytes, 64-byte rounded) */
    void* pack;                      /* the packed B operands of the product running now */
    size_t pack_bytes;
    const char* impl;                /* oneDNN's implementation of the last plan made */
} cpu_inv_prim;

/* bytes the tile plans' buffers hold (memory outside the ledger): the
   threads' scratchpads and the packed operands */
static inline unsigned long long cpu_inv_prim_bytes(void) {
    return (unsigned long long)cpu_inv_prim.scratch_bytes * (unsigned long long)cpu_inv_prim.nth + cpu_inv_prim.pack_bytes;
}

/* the packed operands' buffer, grown to n bytes (64-byte aligned); serial code */
static void* cpu_inv_pack_buf(size_t n) {
    n = (n + 63) / 64 * 64;
    if (n > cpu_inv_prim.pack_bytes) {
        free(cpu_inv_prim.pack);
        if (!(cpu_inv_prim.pack = aligned_alloc(64, n))) {
            fprintf(stderr, "error: out of memory: cannot allocate %zu bytes of packed matmul operands\n", n);
            exit(1);
        }
        cpu_inv_prim.pack_bytes = n;
    }
    return cpu_inv_prim.pack;
}

/* a bf16 / fp32 memory descriptor of a batch of (rows, cols) matrices with
   element strides st (batch, row, column); 2-D when batch == 1 */
static void cpu_inv_md(dnnl_memory_desc_t* md, int batch, int rows, int cols, const long long* st, dnnl_data_type_t dt) {
    dnnl_dims_t d = {batch, rows, cols}, s = {st[0], st[1], st[2]};
    if (batch <= 1) { d[0] = rows; d[1] = cols; s[0] = st[1]; s[1] = st[2]; }
    cpu_gemm_check(dnnl_memory_desc_init_by_strides(md, batch <= 1 ? 2 : 3, d, dt, s), "memory_desc_init");
}

static void cpu_inv_plan_destroy(CpuInvPlan* p) {
    if (!p->valid) return;
    for (int t = 0; t < p->nth; t++)
        for (int j = 0; j < 5; j++) if (p->mem[t * 5 + j]) dnnl_memory_destroy(p->mem[t * 5 + j]);
    free(p->mem);
    dnnl_memory_destroy(p->rsrc);
    dnnl_memory_destroy(p->rdst);
    dnnl_primitive_destroy(p->reorder);
    dnnl_primitive_desc_destroy(p->rpd);
    dnnl_primitive_destroy(p->prim);
    dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof(*p));
}

/* the streams and scratchpads of threads [0, nth), and every memory object
   of plan p for them; serial code */
static void cpu_inv_plan_threads(CpuInvPlan* p, int nth, size_t scratch) {
    if (nth > 256) nth = 256;
    for (int t = cpu_inv_prim.nth; t < nth; t++)
        cpu_gemm_check(dnnl_stream_create(&cpu_inv_prim.stream[t], cpu_gemm_state.engine, dnnl_stream_default_flags), "stream_create");
    if (cpu_inv_prim.nth < nth) cpu_inv_prim.nth = nth;
    if (scratch > cpu_inv_prim.scratch_bytes || !cpu_inv_prim.scratch[0]) {
        size_t n = (scratch + 63) / 64 * 64;
        if (n < 64) n = 64;
        if (n < cpu_inv_prim.scratch_bytes) n = cpu_inv_prim.scratch_bytes;
        for (int t = 0; t < 256; t++) { free(cpu_inv_prim.scratch[t]); cpu_inv_prim.scratch[t] = NULL; }
        cpu_inv_prim.scratch_bytes = n;
    }
    for (int t = 0; t < cpu_inv_prim.nth; t++)
        if (!cpu_inv_prim.scratch[t] && !(cpu_inv_prim.scratch[t] = aligned_alloc(64, cpu_inv_prim.scratch_bytes))) {
            fprintf(stderr, "error: out of memory: cannot allocate %zu bytes of oneDNN matmul scratchpad\n", cpu_inv_prim.scratch_bytes);
            exit(1);
        }
    if (p->nth >= nth) return;
    dnnl_memory_t* m = (dnnl_memory_t*)realloc(p->mem, sizeof(dnnl_memory_t) * 5 * (size_t)nth);
    if (!m) { fprintf(stderr, "error: out of memory: oneDNN memory objects\n"); exit(1); }
    p->mem = m;
    dnnl_memory_desc_t a, c, bias;
    long long sbias[3] = {0, p->N, 1};
    cpu_inv_md(&a, p->batch, p->M, p->K, p->sa, dnnl_bf16);
    cpu_inv_md(&c, p->batch, p->M, p->N, p->sc, p->f32dst ? dnnl_f32 : dnnl_bf16);
    cpu_inv_md(&bias, 1, 1, p->N, sbias, dnnl_bf16);
    dnnl_engine_t e = cpu_gemm_state.engine;
    for (int t = p->nth; t < nth; t++) {
        dnnl_memory_t* q = m + (size_t)t * 5;
        cpu_gemm_check(dnnl_memory_create(&q[0], &a, e, DNNL_MEMORY_NONE), "memory_create");
        cpu_gemm_check(dnnl_memory_create(&q[1], p->bmd, e, DNNL_MEMORY_NONE), "memory_create");
        cpu_gemm_check(dnnl_memory_create(&q[2], &c, e, DNNL_MEMORY_NONE), "memory_create");
        q[3] = NULL;
        if (p->has_bias) cpu_gemm_check(dnnl_memory_create(&q[3], &bias, e, DNNL_MEMORY_NONE), "memory_create");
        cpu_gemm_check(dnnl_memory_create(&q[4], p->smd, e, DNNL_MEMORY_NONE), "memory_create");
    }
    p->nth = nth;
}

/* The tile plan of C[b] (M,N) = alpha op(A)[b] (M,K) op(B)[b] (K,N) [+ bias (N)] [+ C[b]], b < batch:
   bf16 A with element strides sa (row, column), dense; B stored plain with
   strides sb, run packed (pack: p->bbytes bytes, cpu_inv_plan_pack) or as
   stored (dense, copied by the primitive itself per call); C of strides
   sc, dense, in bf16 (one rounding of the fp32 sum, bias and old C) or,
   f32dst, in fp32 (no rounding); with memory objects for this run's
   threads. Serial code only. A oneDNN failure exits 2 (cpu_gemm_check). */
static CpuInvPlan* cpu_inv_plan3(int batch, int M, int N, int K, float alpha, const long long* sa, const long long* sb,
                                 const long long* sc, int has_bias, int accumulate, int f32dst, int pack) {
    cpu_gemm_init();
    int nth = cpu_num_threads();
    for (int i = 0; i < CPU_INV_PLANS; i++) {
        CpuInvPlan* q = &cpu_inv_prim.plan[i];
        if (q->valid && q->batch == batch && q->M == M && q->N == N && q->K == K && q->alpha == alpha && q->has_bias == has_bias &&
            q->accumulate == accumulate && q->f32dst == f32dst && q->pack == pack && !memcmp(q->sa, sa, sizeof q->sa) && !memcmp(q->sb, sb, sizeof q->sb) && !memcmp(q->sc, sc, sizeof q->sc)) {
            q->used = cpu_inv_prim.call;
            cpu_inv_plan_threads(q, nth, 0);
            return q;
        }
    }
    CpuInvPlan* p = NULL;
    for (int tries = 0; tries < CPU_INV_PLANS && !p; tries++) {   /* round robin, never a plan this call holds */
        CpuInvPlan* q = &cpu_inv_prim.plan[cpu_inv_prim.next];
        cpu_inv_prim.next = (cpu_inv_prim.next + 1) % CPU_INV_PLANS;
        if (!q->valid || q->used != cpu_inv_prim.call) p = q;
    }
    cpu_inv_plan_destroy(p);
    p->batch = batch; p->M = M; p->N = N; p->K = K; p->alpha = alpha; p->has_bias = has_bias; p->accumulate = accumulate;
    p->f32dst = f32dst; p->pack = pack;
    memcpy(p->sa, sa, sizeof p->sa); memcpy(p->sb, sb, sizeof p->sb); memcpy(p->sc, sc, sizeof p->sc);
    dnnl_memory_desc_t a, b, bplain, c, bias;
    long long sbias[3] = {0, N, 1};
    dnnl_dims_t bd = {batch, K, N};
    if (batch <= 1) { bd[0] = K; bd[1] = N; }
    cpu_inv_md(&a, batch, M, K, sa, dnnl_bf16);
    if (!pack) cpu_inv_md(&b, batch, K, N, sb, dnnl_bf16);
    else cpu_gemm_check(dnnl_memory_desc_init_by_tag(&b, batch <= 1 ? 2 : 3, bd, dnnl_bf16, dnnl_format_tag_any), "memory_desc_init");
    cpu_inv_md(&bplain, batch, K, N, sb, dnnl_bf16);
    cpu_inv_md(&c, batch, M, N, sc, f32dst ? dnnl_f32 : dnnl_bf16);
    cpu_inv_md(&bias, 1, 1, N, sbias, dnnl_bf16);
    dnnl_matmul_desc_t desc;
    cpu_gemm_check(dnnl_matmul_desc_init(&desc, &a, &b, has_bias ? &bias : NULL, &c), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    cpu_gemm_check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    cpu_gemm_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    if (alpha != 1.0f) cpu_gemm_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "set_output_scales");
    dnnl_post_ops_t po = NULL;
    if (accumulate) {
        cpu_gemm_check(dnnl_post_ops_create(&po), "post_ops_create");
        cpu_gemm_check(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
        cpu_gemm_check(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);   /* the plan's blocking for one thread (see above) */
    cpu_gemm_check(dnnl_primitive_desc_create(&p->pd, &desc, attr, cpu_gemm_state.engine, NULL), "matmul primitive_desc_create");
    cpu_gemm_check(dnnl_primitive_create(&p->prim, p->pd), "primitive_create");
    omp_set_num_threads(saved);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    const char* impl = NULL;
    if (dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success) cpu_inv_prim.impl = impl;
    p->smd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    p->bmd = dnnl_primitive_desc_query_md(p->pd, dnnl_query_weights_md, 0);
    p->bbytes = dnnl_memory_desc_get_size(p->bmd);
    {   /* the layout the bf16 brgemm asks for at avx512_core_bf16 (and AMX):
           "BA16a64b2a", packed by our own loop where it is that one */
        const dnnl_memory_desc_t* m = p->bmd;
        const dnnl_blocking_desc_t* bk = &m->format_desc.blocking;
        p->vnni = batch <= 1 && m->ndims == 2 && m->format_kind == dnnl_blocked && m->extra.flags == 0 && bk->inner_nblks == 3 &&
                  bk->inner_blks[0] == 16 && bk->inner_idxs[0] == 0 && bk->inner_blks[1] == 64 && bk->inner_idxs[1] == 1 &&
                  bk->inner_blks[2] == 2 && bk->inner_idxs[2] == 0 && m->padded_dims[0] % 32 == 0 && m->padded_dims[1] % 64 == 0 &&
                  bk->strides[0] == 2048 && bk->strides[1] == m->padded_dims[0] / 32 * 2048 && m->offset0 == 0 &&
                  p->bbytes == (size_t)m->padded_dims[0] * (size_t)m->padded_dims[1] * 2;
        p->vnni = !p->vnni ? 0 : sb[2] == 1 ? 1 : sb[1] == 1 ? 2 : 0;
        p->kp = m->padded_dims[0];
        p->np = m->padded_dims[1];
    }
    cpu_gemm_check(dnnl_reorder_primitive_desc_create(&p->rpd, &bplain, cpu_gemm_state.engine, p->bmd, cpu_gemm_state.engine, NULL),
                   "reorder primitive_desc_create");
    cpu_gemm_check(dnnl_primitive_create(&p->reorder, p->rpd), "reorder primitive_create");
    cpu_gemm_check(dnnl_memory_create(&p->rsrc, &bplain, cpu_gemm_state.engine, DNNL_MEMORY_NONE), "memory_create");
    cpu_gemm_check(dnnl_memory_create(&p->rdst, p->bmd, cpu_gemm_state.engine, DNNL_MEMORY_NONE), "memory_create");
    size_t sbytes = p->smd ? dnnl_memory_desc_get_size(p->smd) : 0;
    p->valid = 1;
    p->used = cpu_inv_prim.call;
    cpu_inv_plan_threads(p, nth, sbytes);
    return p;
}

/* the 2-D tile plan (batch 1, no scale): strides sa, sb, sc (row, column) */
static CpuInvPlan* cpu_inv_plan(int M, int N, int K, const long long* sa, const long long* sb, const long long* sc, int has_bias,
                                int accumulate, int f32dst, int pack) {
    const long long a3[3] = {0, sa[0], sa[1]}, b3[3] = {0, sb[0], sb[1]}, c3[3] = {0, sc[0], sc[1]};
    return cpu_inv_plan3(1, M, N, K, 1.0f, a3, b3, c3, has_bias, accumulate, f32dst, pack);
}

/* dst <- B (K, N) bf16, rows ldb elements apart, in oneDNN's blocked
   layout "BA16a64b2a" with padded dims (Kp, Np) (Kp a multiple of 32, Np of
   64; zeros in the padding): block (kb, nb) of 32 rows x 64 columns at
   (nb * Kp / 32 + kb) * 2048 elements, and in it element (k, n) at
   (k % 32 / 2) * 128 + (n % 64) * 2 + k % 2: row pairs interleaved, the
   layout oneDNN's bf16 brgemm reads B in (oneDNN's memory_desc blocking:
   inner blocks 16a, 64b, 2a). Exact (a copy); tests/unit/test_kernels.c
   compares it with oneDNN's reorder byte for byte. Threaded over the
   column blocks; serial code. (oneDNN's generic reorder kernel took 162
   thread-ms a step at 124M with --invariant 1 on a Zen 4, twice what the
   plain product's own copy of B took.) */
static void cpu_inv_pack_vnni(uint16_t* dst, const uint16_t* B, long long ldb, int K, int N, long long Kp, long long Np) {
    const long long nbk = Kp / 32, nbn = Np / 64;
#pragma omp parallel for schedule(static)
    for (long long nb = 0; nb < nbn; nb++) {
        const int n0 = (int)(nb * 64), nw = N - n0 < 64 ? (N - n0 > 0 ? N - n0 : 0) : 64;
        for (long long kb = 0; kb < nbk; kb++) {
            uint16_t* o = dst + (size_t)(nb * nbk + kb) * 2048;
            for (int kp = 0; kp < 16; kp++) {
                const int k = (int)(kb * 32) + 2 * kp;
                const uint16_t* r0 = k < K ? B + (size_t)k * (size_t)ldb + n0 : NULL;
                const uint16_t* r1 = k + 1 < K ? B + (size_t)(k + 1) * (size_t)ldb + n0 : NULL;
                uint16_t* q = o + kp * 128;
                int n = 0;
#if defined(__AVX2__)
                if (r0 && r1 && nw == 64)
                    for (; n < 64; n += 16) {
                        __m256i a = _mm256_loadu_si256((const __m256i*)(r0 + n)), b = _mm256_loadu_si256((const __m256i*)(r1 + n));
                        __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
                        _mm256_storeu_si256((__m256i*)(q + 2 * n), _mm256_permute2x128_si256(lo, hi, 0x20));
                        _mm256_storeu_si256((__m256i*)(q + 2 * n + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
                    }
#endif
                for (; n < 64; n++) {
                    q[2 * n] = r0 && n < nw ? r0[n] : 0;
                    q[2 * n + 1] = r1 && n < nw ? r1[n] : 0;
                }
            }
        }
    }
}

/* cpu_inv_pack_vnni for B stored transposed: B (K, N) with B[k][n] at
   W[n * ldw + k] (the forward's weights, (OC, C) row-major: K = C, N = OC).
   The row pairs of B are 32-bit words of W's rows, so each 32 x 64 block is
   a 64 x 16 transpose of 32-bit words (AVX2: 8 x 8 at a time). Same layout,
   exact, threaded over the column blocks; serial code. */
static void cpu_inv_pack_vnni_t(uint16_t* dst, const uint16_t* W, long long ldw, int K, int N, long long Kp, long long Np) {
    const long long nbk = Kp / 32, nbn = Np / 64;
#pragma omp parallel for schedule(static)
    for (long long nb = 0; nb < nbn; nb++) {
        const int n0 = (int)(nb * 64);
        for (long long kb = 0; kb < nbk; kb++) {
            uint16_t* o = dst + (size_t)(nb * nbk + kb) * 2048;
            const int k0 = (int)(kb * 32);
            int done = 0;
#if defined(__AVX2__)
            if (n0 + 64 <= N && k0 + 32 <= K && ldw % 2 == 0 && ((uintptr_t)W & 3) == 0) {
                uint32_t* q = (uint32_t*)o;   /* q[kp * 64 + n] = pair kp of row n0 + n */
                for (int nn = 0; nn < 64; nn += 8)
                    for (int kk = 0; kk < 16; kk += 8) {
                        __m256i r[8], t[8];
                        for (int i = 0; i < 8; i++)
                            r[i] = _mm256_loadu_si256((const __m256i*)(W + (size_t)(n0 + nn + i) * (size_t)ldw + k0 + 2 * kk));
                        for (int i = 0; i < 8; i += 2) {
                            t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
                            t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
                        }
                        for (int i = 0; i < 8; i += 4) {
                            r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
                            r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
                            r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
                            r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
                        }
                        /* r[0..3]: columns 0,1,2,3 (low lane) and 4,5,6,7 (high lane) of rows 0-3; r[4..7] of rows 4-7 */
                        for (int i = 0; i < 4; i++) {
                            __m256i lo = _mm256_permute2x128_si256(r[i], r[i + 4], 0x20);
                            __m256i hi = _mm256_permute2x128_si256(r[i], r[i + 4], 0x31);
                            _mm256_storeu_si256((__m256i*)(q + (size_t)(kk + i) * 64 + nn), lo);
                            _mm256_storeu_si256((__m256i*)(q + (size_t)(kk + i + 4) * 64 + nn), hi);
                        }
                    }
                done = 1;
            }
#endif
            if (!done)
                for (int kp = 0; kp < 16; kp++)
                    for (int n = 0; n < 64; n++)
                        for (int j = 0; j < 2; j++) {
                            int k = k0 + 2 * kp + j;
                            o[kp * 128 + n * 2 + j] = k < K && n0 + n < N ? W[(size_t)(n0 + n) * (size_t)ldw + k] : 0;
                        }
        }
    }
}

/* dst (p->bbytes bytes) <- B (stored plain, strides p->sb) in the layout
   plan p runs: exact (cpu_inv_pack_vnni / _t where the layout is BA16a64b2a,
   else a oneDNN reorder, threaded by oneDNN); serial code */
static void cpu_inv_plan_pack_reorder(const CpuInvPlan* p, const void* B, void* dst);
static void cpu_inv_plan_pack(const CpuInvPlan* p, const void* B, void* dst) {
    static int reorder = -1;   /* LLMC_INV_PACK_REORDER=1: oneDNN's reorder always (for measurements) */
    if (reorder < 0) reorder = getenv("LLMC_INV_PACK_REORDER") && getenv("LLMC_INV_PACK_REORDER")[0] == '1';
    if (p->vnni == 1 && !reorder) cpu_inv_pack_vnni((uint16_t*)dst, (const uint16_t*)B, p->sb[1], p->K, p->N, p->kp, p->np);
    else if (p->vnni == 2 && !reorder) cpu_inv_pack_vnni_t((uint16_t*)dst, (const uint16_t*)B, p->sb[2], p->K, p->N, p->kp, p->np);
    else cpu_inv_plan_pack_reorder(p, B, dst);
}

/* the same by oneDNN's reorder (threaded by oneDNN); serial code */
static void cpu_inv_plan_pack_reorder(const CpuInvPlan* p, const void* B, void* dst) {
    cpu_gemm_check(dnnl_memory_set_data_handle(p->rsrc, (void*)B), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(p->rdst, dst), "set_data_handle");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->rsrc}, {DNNL_ARG_TO, p->rdst}};
    cpu_gemm_check(dnnl_primitive_execute(p->reorder, cpu_gemm_state.stream, 2, args), "reorder execute");
    cpu_gemm_check(dnnl_stream_wait(cpu_gemm_state.stream), "stream_wait");
}

/* runs plan p on thread ith (inside a parallel region, on this thread
   alone): C = op(A) Bpacked [+ bias] [+ C] */
static inline void cpu_inv_plan_run(const CpuInvPlan* p, int ith, const void* A, const void* Bpacked, void* C, const void* bias) {
    if (ith >= p->nth) { fprintf(stderr, "error: --invariant 1: tile plan without memory objects for thread %d of %d\n", ith, p->nth); exit(2); }
    dnnl_memory_t* m = p->mem + (size_t)ith * 5;
    cpu_gemm_check(dnnl_memory_set_data_handle(m[0], (void*)A), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(m[1], (void*)Bpacked), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(m[2], C), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(m[4], cpu_inv_prim.scratch[ith]), "set_data_handle");
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}, {DNNL_ARG_SCRATCHPAD, m[4]},
                               {DNNL_ARG_BIAS, m[3]}};
    if (p->has_bias) cpu_gemm_check(dnnl_memory_set_data_handle(m[3], (void*)bias), "set_data_handle");
    cpu_gemm_check(dnnl_primitive_execute(p->prim, cpu_inv_prim.stream[ith], p->has_bias ? 5 : 4, args), "matmul execute");
    cpu_gemm_check(dnnl_stream_wait(cpu_inv_prim.stream[ith]), "stream_wait");
}
#endif /* LLMC_BF16 */

/* ------------------------------------------------------------------------ */
/* --invariant 1's weight gradient, both programs (cpu_inv_T != 0, common.h) */

#if defined(__AVX2__)
#include <immintrin.h>
/* 8 consecutive elements as fp32 (bf16: the bits shifted into the high half) */
static inline __m256 cpu_load8(const floatX* p) {
#ifdef LLMC_BF16
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#else
    return _mm256_loadu_ps(p);
#endif
}
#endif

/* dst[i ldd + t] = src[t lds + i] as fp32, for i < ni, t < nt: a transposed
   copy (8 x 8 blocks in AVX2 registers where it has them). Exact. */
static inline void cpu_transpose_cvt(float* dst, size_t ldd, const floatX* src, size_t lds, int ni, int nt) {
    int ib = 0;
#if defined(__AVX2__)
    const int nt8 = nt & ~7;
    for (; ib + 8 <= ni; ib += 8) {
        for (int t0 = 0; t0 < nt8; t0 += 8) {
            __m256 r0 = cpu_load8(src + (size_t)(t0 + 0) * lds + ib), r1 = cpu_load8(src + (size_t)(t0 + 1) * lds + ib);
            __m256 r2 = cpu_load8(src + (size_t)(t0 + 2) * lds + ib), r3 = cpu_load8(src + (size_t)(t0 + 3) * lds + ib);
            __m256 r4 = cpu_load8(src + (size_t)(t0 + 4) * lds + ib), r5 = cpu_load8(src + (size_t)(t0 + 5) * lds + ib);
            __m256 r6 = cpu_load8(src + (size_t)(t0 + 6) * lds + ib), r7 = cpu_load8(src + (size_t)(t0 + 7) * lds + ib);
            __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1);
            __m256 a2 = _mm256_unpacklo_ps(r2, r3), a3 = _mm256_unpackhi_ps(r2, r3);
            __m256 a4 = _mm256_unpacklo_ps(r4, r5), a5 = _mm256_unpackhi_ps(r4, r5);
            __m256 a6 = _mm256_unpacklo_ps(r6, r7), a7 = _mm256_unpackhi_ps(r6, r7);
            __m256 b0 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(1, 0, 1, 0)), b1 = _mm256_shuffle_ps(a0, a2, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b2 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(1, 0, 1, 0)), b3 = _mm256_shuffle_ps(a1, a3, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b4 = _mm256_shuffle_ps(a4, a6, _MM_SHUFFLE(1, 0, 1, 0)), b5 = _mm256_shuffle_ps(a4, a6, _MM_SHUFFLE(3, 2, 3, 2));
            __m256 b6 = _mm256_shuffle_ps(a5, a7, _MM_SHUFFLE(1, 0, 1, 0)), b7 = _mm256_shuffle_ps(a5, a7, _MM_SHUFFLE(3, 2, 3, 2));
            float* d = dst + (size_t)ib * ldd + t0;
            _mm256_storeu_ps(d + 0 * ldd, _mm256_permute2f128_ps(b0, b4, 0x20));
            _mm256_storeu_ps(d + 1 * ldd, _mm256_permute2f128_ps(b1, b5, 0x20));
            _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(b2, b6, 0x20));
            _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(b3, b7, 0x20));
            _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(b0, b4, 0x31));
            _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(b1, b5, 0x31));
            _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(b2, b6, 0x31));
            _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(b3, b7, 0x31));
        }
        for (int t = nt8; t < nt; t++)
            for (int q = 0; q < 8; q++) dst[(size_t)(ib + q) * ldd + t] = ldx(src[(size_t)t * lds + ib + q]);
    }
#endif
    for (int t = 0; t < nt; t++)
        for (int i = ib; i < ni; i++) dst[(size_t)i * ldd + t] = ldx(src[(size_t)t * lds + i]);
}

/* d[j] = d[j] + the complete binary tree over the nseq (1, 2, 4 or 8)
   leaves L[s][j], for j < n, every leaf and node rounded by cpu_inv_round
   (bf16; nothing in fp32), in one pass: the sums cpu_tree_push and
   cpu_tree_root form for those leaves ((L0 + L1) + (L2 + L3) for 4), the
   pairing being all that matters (fp32 addition is commutative). */
static inline void cpu_inv_tree_add(floatX* d, float* const* L, int nseq, int n) {
#define R_(x) cpu_inv_round(x)
    const float *l0 = L[0], *l1 = L[nseq > 1], *l2 = L[nseq > 2 ? 2 : 0], *l3 = L[nseq > 2 ? 3 : 0];
    if (nseq == 1) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(l0[j]));
    } else if (nseq == 2) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(R_(l0[j]) + R_(l1[j])));
    } else if (nseq == 4) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(R_(R_(l0[j]) + R_(l1[j])) + R_(R_(l2[j]) + R_(l3[j]))));
    } else {
        const float *l4 = L[4], *l5 = L[5], *l6 = L[6], *l7 = L[7];
#pragma omp simd
        for (int j = 0; j < n; j++) {
            float a = R_(R_(R_(l0[j]) + R_(l1[j])) + R_(R_(l2[j]) + R_(l3[j])));
            float b = R_(R_(R_(l4[j]) + R_(l5[j])) + R_(R_(l6[j]) + R_(l7[j])));
            d[j] = stx(ldx(d[j]) + R_(a + b));
        }
    }
#undef R_
}

#ifdef LLMC_BF16
/* cpu_inv_tree_add on leaves already stored as bf16 (the primitive's leaf
   tiles, rounded by its down-conversion): the same tree, the leaves read
   exactly instead of rounded */
static inline void cpu_inv_tree_add_x(floatX* d, const floatX* const* L, int nseq, int n) {
#define R_(x) cpu_inv_round(x)
    const floatX *l0 = L[0], *l1 = L[nseq > 1], *l2 = L[nseq > 2 ? 2 : 0], *l3 = L[nseq > 2 ? 3 : 0];
    if (nseq == 1) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + ldx(l0[j]));
    } else if (nseq == 2) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(ldx(l0[j]) + ldx(l1[j])));
    } else if (nseq == 4) {
#pragma omp simd
        for (int j = 0; j < n; j++) d[j] = stx(ldx(d[j]) + R_(R_(ldx(l0[j]) + ldx(l1[j])) + R_(ldx(l2[j]) + ldx(l3[j]))));
    } else {
        const floatX *l4 = L[4], *l5 = L[5], *l6 = L[6], *l7 = L[7];
#pragma omp simd
        for (int j = 0; j < n; j++) {
            float a = R_(R_(ldx(l0[j]) + ldx(l1[j])) + R_(ldx(l2[j]) + ldx(l3[j])));
            float b = R_(R_(ldx(l4[j]) + ldx(l5[j])) + R_(ldx(l6[j]) + ldx(l7[j])));
            d[j] = stx(ldx(d[j]) + R_(a + b));
        }
    }
#undef R_
}
#endif

/* dweight (OC,C) += the pairwise tree over the nseq = N/T sequences s of
   dout_s^T (OC,T) @ inp_s (T,C), output tile by output tile: per tile of
   64 rows (of OC) x CPU_INV_COLS columns (of C), each sequence's product is
   one single-threaded sgemm with K = T (the leaf, rounded to the storage
   type by cpu_inv_round: bf16, or nothing in fp32), the leaves are added as
   the complete binary tree (every node rounded likewise) and the root is
   added to dweight (one rounding): for nseq = 1, 2, 4, 8 all leaves are
   kept and the tree and the add run in one pass (cpu_inv_tree_add), else
   as a binary counter (cpu_tree_push; the same sums). The tiles split among
   the threads, row block by row block; a tile's leaves and tree stay in the
   thread's cache (never a full-size leaf). The sgemm's A is the tile's 64
   columns of dout_s transposed into a packed fp32 (64,T) block (once per
   row block and thread, cpu_transpose_cvt; an A read in place, transposed,
   with the leading dimension OC, ran at half speed), its B the rows of an
   fp32 copy of inp with CPU_INV_BPAD floats of padding after each row (C a
   multiple of 256 and 64-byte aligned rows put the tile's T rows in the
   same few cache sets: twice the time for C = 3072 on an AMD EPYC Zen 3).
   The tile shape and the operands' layout do not depend on N or on the
   thread count, so no element's tree does. dout (N,OC), inp (N,C), N a
   multiple of T. shared(n): n floats for the copy of inp (N (C +
   CPU_INV_BPAD)), held for the call; scratch(ith, n): n floats owned by
   thread ith for the call (max(nseq, log2(nseq) + 2) 64 CPU_INV_COLS + 64 N
   at most). prim (the bf16 program, the class on the primitive): the
   leaves on tile plans instead, 64 rows x all C (below). */
#define CPU_INV_BPAD 16   /* floats of padding after each row of the B copy (see cpu_inv_dweight_tree) */
static inline void cpu_inv_dweight_tree(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC,
                                        float* (*shared)(size_t n), float* (*scratch)(int ith, size_t n), int prim) {
    cpu_blas_init();
    /* the tile: 64 rows x CPU_INV_COLS columns; on the primitive 64 rows x
       all C (measured on an AMD EPYC Zen 4, 2 threads, 124M's shapes at
       T = 64, B = 4: 256 columns took 1.1-1.15x as long, 128 or 256 rows
       1.0-1.7x) */
    const int OW = 64, TC = prim ? C : CPU_INV_COLS;
    const int T = cpu_inv_T, nseq = N / T, no = (OC + OW - 1) / OW, nc = (C + TC - 1) / TC;
    int levels = 1;
    while ((1 << (levels - 1)) < nseq) levels++;
    const size_t w = (size_t)OW * TC;
    const int ldb = C + CPU_INV_BPAD;
    const int fused = nseq == 1 || nseq == 2 || nseq == 4 || nseq == 8;   /* cpu_inv_tree_add */
    const int nbuf = fused ? nseq : levels + 1;
#ifdef LLMC_BF16
    /* prim: each leaf (64, cw) in fp32 = one tile plan of the bf16
       primitive on the row block's 64 columns of dout_s, copied into a dense
       transposed (T, 64) bf16 block (zeros past OC: the last row block runs
       the same 64-row plan; once per row block and sequence), and on the
       column block of inp_s, packed once per call (nseq x nc reorders, each
       into per bytes); plans[cw != CPU_INV_COLS] */
    CpuInvPlan* plans[2] = {NULL, NULL};
    char* packed = NULL;
    size_t per = 0;
    if (prim) {
        cpu_inv_prim.call++;
        const long long sa[2] = {1, OW}, sb[2] = {C, 1};
        for (int j = 0; j < 2; j++) {
            int cw = j ? C % TC : TC;
            if (cw == 0 || (!j && C < TC)) continue;
            const long long sc[2] = {cw, 1};
            plans[j] = cpu_inv_plan(OW, cw, T, sa, sb, sc, 0, 0, 0, 1);
            size_t b = (plans[j]->bbytes + 63) / 64 * 64;
            if (b > per) per = b;
        }
        packed = (char*)cpu_inv_pack_buf((size_t)nc * nseq * per);
        for (int cb = 0; cb < nc; cb++) {
            const CpuInvPlan* q = plans[C - cb * TC < TC];
            for (int s = 0; s < nseq; s++)
                cpu_inv_plan_pack(q, inp + (size_t)s * T * C + (size_t)cb * TC, packed + ((size_t)cb * nseq + s) * per);
        }
    }
#else
    (void)prim;
#endif
    float* inpf = prim ? NULL : shared((size_t)N * ldb);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        if (!prim) {
#pragma omp for schedule(static)
            for (int n = 0; n < N; n++) {
                const floatX* x = inp + (size_t)n * C;
                float* b = inpf + (size_t)n * ldb;
#pragma omp simd
                for (int j = 0; j < C; j++) b[j] = ldx(x[j]);
            }
        }
        /* the leaves, then per sequence the row block's (ow,T) block of dout_s^T (fp32; the primitive's: (T,ow) bf16) */
        float* sc = scratch(ith, (size_t)nbuf * w + (prim ? ((size_t)N * OW + 1) / 2 : (size_t)N * 64));
        float* At = sc + (size_t)nbuf * w;
        int last_o0 = -1;
#pragma omp for schedule(static)
        for (int k = 0; k < no * nc; k++) {
            int o0 = (k / nc) * OW, c0 = (k % nc) * TC;
            int ow = OC - o0 < OW ? OC - o0 : OW, cw = C - c0 < TC ? C - c0 : TC;
#ifdef LLMC_BF16
            const CpuInvPlan* lp = prim ? plans[cw != TC] : NULL;
            floatX* Ab = (floatX*)At;
            if (prim && o0 != last_o0) {   /* dense (T, 64) copies of the row block's columns of each dout_s, zeros past OC */
                for (int s = 0; s < nseq; s++)
                    for (int t = 0; t < T; t++) {
                        floatX* d = Ab + ((size_t)s * T + t) * OW;
                        memcpy(d, dout + ((size_t)s * T + t) * OC + o0, sizeof(floatX) * (size_t)ow);
                        if (ow < OW) memset(d + ow, 0, sizeof(floatX) * (size_t)(OW - ow));
                    }
                last_o0 = o0;
            }
#define CPU_INV_LEAF(dst, s) do { \
                if (lp) cpu_inv_plan_run(lp, ith, Ab + (size_t)(s) * T * OW, packed + ((size_t)(k % nc) * nseq + (s)) * per, (dst), NULL); \
                else cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)(s) * ow * T, T, inpf + (size_t)(s) * T * ldb + c0, ldb, 0.0f, (dst), cw); \
            } while (0)
#else
#define CPU_INV_LEAF(dst, s) cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)(s) * ow * T, T, inpf + (size_t)(s) * T * ldb + c0, ldb, 0.0f, (dst), cw)
#endif
            if (!prim && o0 != last_o0) {   /* the tiles of one row block follow each other: packed once */
                for (int s = 0; s < nseq; s++)
                    cpu_transpose_cvt(At + (size_t)s * ow * T, T, dout + (size_t)s * T * OC + o0, OC, ow, T);
                last_o0 = o0;
            }
            size_t tw = (size_t)ow * cw;
#ifdef LLMC_BF16
            if (fused && lp) {   /* the primitive's leaves in bf16 (its down-conversion is the leaf's rounding) */
                floatX* L[8];
                for (int s = 0; s < nseq; s++) {
                    L[s] = (floatX*)(sc + (size_t)s * w);
                    cpu_inv_plan_run(lp, ith, Ab + (size_t)s * T * OW, packed + ((size_t)(k % nc) * nseq + s) * per, L[s], NULL);
                }
                for (int i = 0; i < ow; i++) {
                    const floatX* Li[8] = {0};
                    for (int s = 0; s < nseq; s++) Li[s] = L[s] + (size_t)i * cw;
                    cpu_inv_tree_add_x(dweight + (size_t)(o0 + i) * C + c0, Li, nseq, cw);
                }
                continue;
            }
#endif
            if (fused) {   /* every leaf kept, the tree and the add to dweight in one pass per row */
                float* L[8];
                for (int s = 0; s < nseq; s++) {
                    L[s] = sc + (size_t)s * w;
                    CPU_INV_LEAF(L[s], s);
                }
                for (int i = 0; i < ow; i++) {
                    float* Li[8] = {0};
                    for (int s = 0; s < nseq; s++) Li[s] = L[s] + (size_t)i * cw;
                    cpu_inv_tree_add(dweight + (size_t)(o0 + i) * C + c0, Li, nseq, cw);
                }
                continue;
            }
            float* stack[40] = {0};
            float* freel[40];
            int nfree = 0;
            for (int l = 0; l <= levels; l++) freel[nfree++] = sc + (size_t)l * w;
            for (int s = 0; s < nseq; s++) {
                float* leaf = freel[--nfree];
                CPU_INV_LEAF(leaf, s);
#ifdef LLMC_BF16
                if (lp) {   /* the primitive's bf16 leaf (rows of cw, OW rows) widened in place, from the end */
                    const char* lb = (const char*)leaf;
                    for (size_t i = tw; i-- > 0;) {   /* element i's bf16 lies at or past float i: read before written (memcpy: no aliasing assumed) */
                        floatX v;
                        memcpy(&v, lb + i * sizeof(floatX), sizeof(floatX));
                        leaf[i] = ldx(v);
                    }
                } else {
#pragma omp simd
                    for (size_t i = 0; i < tw; i++) leaf[i] = cpu_inv_round(leaf[i]);
                }
#endif
                cpu_tree_push(stack, freel, &nfree, leaf, tw);
            }
            float* root = cpu_tree_root(stack, levels + 1, tw);
            for (int i = 0; i < ow && root; i++) {
                floatX* d = dweight + (size_t)(o0 + i) * C + c0;
                const float* r = root + (size_t)i * cw;
#pragma omp simd
                for (int j = 0; j < cw; j++) d[j] = stx(ldx(d[j]) + r[j]);
            }
#undef CPU_INV_LEAF
        }
    }
}

#ifdef LLMC_BF16
/* --invariant 1 (cpu_inv_T != 0, common.h), the bf16 program: the
   fp32-copy path on fixed tiles. C (N,OC) = A (N,K) @ op(W) [+ bias]
   [+ C] with W stored (OC,K) (tb = 1, the forward) or (K,OC) (tb = 0,
   dinp): A converted to fp32 once (the shared buffer), then column block
   by column block (CPU_INV_COLS columns of C) the block's panel of W
   converted (the thread's buffer) and, per tile of cpu_inv_rows(T) rows,
   one single-threaded sgemm over the whole K and one rounding in the
   epilogue: a row's bits depend neither on N nor on the thread count. The
   fp32 copies have CPU_INV_BPAD floats of padding after each row (rows of
   a multiple of 256 floats would share cache sets: see
   cpu_inv_dweight_tree). */
static void cpu_inv_gemm_rows_bf16(floatX* C, const floatX* A, const floatX* W, const floatX* bias, int N, int K, int OC,
                                   int tb, int accumulate) {
    cpu_blas_init();
    const int lda = K + CPU_INV_BPAD, ldp = tb ? K + CPU_INV_BPAD : CPU_INV_COLS + CPU_INV_BPAD;
    const int R = cpu_inv_rows(cpu_inv_T), nr = N / R, nc = (OC + CPU_INV_COLS - 1) / CPU_INV_COLS;
    float* Af = cpu_gemm_grow(&cpu_gemm_state.shared, &cpu_gemm_state.shared_cap, (size_t)N * lda);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) cpu_gemm_cvt(Af + (size_t)r * lda, A, r, 1, 0, K, K);
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        /* the panel: tb = 1 the block's cw rows of W (cw, K); tb = 0 its cw columns (K, cw) */
        size_t pn = tb ? (size_t)CPU_INV_COLS * ldp : (size_t)K * ldp;
        float* buf = cpu_gemm_grow(&cpu_gemm_state.tbuf[ith], &cpu_gemm_state.tcap[ith], pn + (size_t)R * CPU_INV_COLS);
        float* Wp = buf;
        float* Cf = buf + pn;
        int last_c0 = -1;
#pragma omp for schedule(static)
        for (int k = 0; k < nr * nc; k++) {
            int c0 = (k / nr) * CPU_INV_COLS, i0 = (k % nr) * R, cw = OC - c0 < CPU_INV_COLS ? OC - c0 : CPU_INV_COLS;
            if (c0 != last_c0) {
                if (tb) for (int i = 0; i < cw; i++) cpu_gemm_cvt(Wp + (size_t)i * ldp, W, c0 + i, 1, 0, K, K);
                else for (int i = 0; i < K; i++) cpu_gemm_cvt(Wp + (size_t)i * ldp, W, i, 1, c0, cw, OC);
                last_c0 = c0;
            }
            cpu_sgemm(0, tb, R, cw, K, 1.0f, Af + (size_t)i0 * lda, lda, Wp, ldp, 0.0f, Cf, cw);
            cpu_gemm_epilogue(C, OC, i0, R, c0, cw, Cf, bias, accumulate);
        }
    }
}

/* --invariant 1, the bf16 program, the primitive's classes: C (N,OC) =
   A (N,K) @ op(W) [+ bias] [+ C] (tb as cpu_inv_gemm_rows_bf16) on fixed
   tiles of cpu_inv_rows(T) rows x all OC columns, each one tile plan of
   oneDNN's bf16 primitive (cpu_inv_plan: one thread; the fp32 sum, bias
   and old C rounded once, by the primitive's bias and sum post-op), A and
   C read and written in place (a tile of whole rows is dense). W, tb = 0
   ((K,OC) stored), packed once per call by a oneDNN reorder; tb = 1 ((OC,K)
   stored) read as stored, the primitive transposing it per tile (the
   reorder of that layout was the slower: 1.6 ms for 124M's fcproj
   weights on 2 threads of an AMD EPYC Zen 4, its whole plain forward
   2.8 ms). Whole rows, not column tiles: a column tile of C or of
   a (K,OC) W is strided, which oneDNN 2.6's brgemm matmul does not take
   (its gemm:jit mallocs packing buffers on every call: 1.75x the plain
   step at d6), and column blocks on dense copies of the tile's C (copied
   in and out) were slower still on an AMD EPYC Zen 4 (124M: forward and
   dinp 1.27 s and 1.66 s against 1.14 s and 1.23 s over 6 steps). The
   tiles are taken by the threads one at a time (schedule(dynamic): no
   tile's result depends on its thread); fewer tiles than threads leave
   threads idle (N = B T < 64 x threads). */
static void cpu_inv_gemm_rows_prim(floatX* C, const floatX* A, const floatX* W, const floatX* bias, int N, int K, int OC,
                                   int tb, int accumulate) {
    const int R = cpu_inv_rows(cpu_inv_T), nr = N / R;
    cpu_inv_prim.call++;
    const long long sa[2] = {K, 1}, sb[2] = {tb ? 1 : OC, tb ? K : 1}, sc[2] = {OC, 1};
    /* B packed once per call (W's rows for dinp; for the forward, W stored
       (OC,K), only where our transposing loop knows the layout: oneDNN's
       reorder of that layout was slower than the primitive's own copy of B
       in every tile, 124M on a Zen 4) */
    int pk = 1;
    CpuInvPlan* p = cpu_inv_plan(R, OC, K, sa, sb, sc, bias != NULL, accumulate, 0, 1);
    if (tb && p->vnni != 2) { pk = 0; p = cpu_inv_plan(R, OC, K, sa, sb, sc, bias != NULL, accumulate, 0, 0); }
    void* wp = (void*)W;
    if (pk) { wp = cpu_inv_pack_buf(p->bbytes); cpu_inv_plan_pack(p, W, wp); }
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < nr; i++)
            cpu_inv_plan_run(p, ith, A + (size_t)i * R * K, wp, C + (size_t)i * R * OC, bias);
    }
}

/* thread ith's buffer of the fp32-copy path (counted by cpu_gemm_internal_bytes) */
static float* cpu_gemm_thread_buf(int ith, size_t n) {
    return cpu_gemm_grow(&cpu_gemm_state.tbuf[ith], &cpu_gemm_state.tcap[ith], n);
}

/* the fp32 path's shared buffer (counted by cpu_gemm_internal_bytes) */
static float* cpu_gemm_shared_buf(size_t n) {
    return cpu_gemm_grow(&cpu_gemm_state.shared, &cpu_gemm_state.shared_cap, n);
}

/* --invariant 1, the bf16 program: dweight (OC,C) += the pairwise tree
   over the N/T sequences of dout_s^T inp_s (cpu_inv_dweight_tree: leaves
   and nodes rounded to bf16, then dweight = round(dweight + root)); the
   fp32 copies (inp, dout's tile blocks) in the fp32 path's buffers. */
static void cpu_inv_dweight_bf16(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC, int prim) {
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_gemm_shared_buf, cpu_gemm_thread_buf, prim);
}

#else /* fp32 program */

/* ------------------------------------------------------------------------ */
/* layout-invariant products (cpu_inv_T != 0, common.h)                     */

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T [+ bias] (beta = 0: overwrite,
   1: accumulate into out) on fixed tiles of cpu_inv_rows(T) rows x
   cpu_inv_cols(OC) columns, one single-threaded sgemm per tile: a row's bits do
   not depend on N (= B*T) or on the thread count. The tiles run column
   block by column block (the block's weights stay in cache over its row
   tiles). tb: weight stored (OC,C) (1) or (C,OC) (0, the dinp product:
   dinp = dout @ weight). */
static inline void cpu_inv_rows_gemm(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                                     int tb, float beta) {
    cpu_blas_init();
    int R = cpu_inv_rows(cpu_inv_T), nr = N / R, tc = cpu_inv_cols(OC), nc = (OC + tc - 1) / tc;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nr * nc; k++) {
        int c0 = (k / nr) * tc, i0 = (k % nr) * R, cw = OC - c0 < tc ? OC - c0 : tc;
        float* o = out + (size_t)i0 * OC + c0;
        float b = beta;
        if (bias) { for (int i = 0; i < R; i++) memcpy(o + (size_t)i * OC, bias + c0, sizeof(float) * cw); b = 1.0f; }
        cpu_sgemm(0, tb, R, cw, C, 1.0f, inp + (size_t)i0 * C, C, tb ? weight + (size_t)c0 * C : weight + c0, tb ? C : OC, b, o, OC);
    }
}

static float* cpu_inv_thread_scratch(int ith, size_t n) { (void)ith; return cpu_thread_scratch(n); }
/* --invariant 1's copy of a dweight product's input (cpu_inv_dweight_tree),
   kept and grown to the largest N (C + CPU_INV_BPAD) floats: memory
   outside the ledger, as the thread scratch (at most a few MB: 3.2 MB for
   GPT-2 124M's fcproj at B*T = 256). Exits on allocation failure. */
static float* cpu_inv_shared(size_t n) {
    static float* buf = NULL;
    static size_t cap = 0;
    if (n > cap) {
        free(buf);
        buf = (float*)aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        if (!buf) { fprintf(stderr, "error: out of memory: %zu bytes of matmul scratch\n", n * sizeof(float)); exit(1); }
        cap = n;
    }
    return buf;
}

/* dweight (OC,C) += the pairwise tree over the N/T sequences of dout_s^T
   (OC,T) @ inp_s (T,C) (cpu_inv_dweight_tree): one fixed tree per element
   whatever B and the thread count. */
static inline void cpu_inv_dweight(float* dweight, const float* dout, const float* inp, int N, int C, int OC) {
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_inv_shared, cpu_inv_thread_scratch, 0);
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_INVARIANT_H */
