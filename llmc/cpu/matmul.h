/*
 * llmc/cpu/matmul.h -- the linear layer (matrix product + bias), forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/matmul.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include "common.h"

#ifdef LLMC_BF16
/* ------------------------------------------------------------------------ */
/* bf16 program: oneDNN's matmul primitive                                  */

/* cpu_gemm_bf16() is the one entry point of the bf16 program's linear
   layers: row-major C (M,N) = op(A) (M,K) op(B) (K,N) [+ bias (N), broadcast
   over rows] [+ C], on bf16 storage with fp32 accumulation (oneDNN's matmul
   primitive: on CPUs with AMX-BF16 its "brg:avx512_core_amx" kernels, with
   AVX512-BF16 "brg:avx512_core_bf16"; oneDNN chooses). The sum over K, the
   bias and the old value of C (the `accumulate` flag: oneDNN's sum post-op)
   are added in fp32 and the result is rounded ONCE to bf16 (round to nearest
   even), as cuBLASLt does in the CUDA program (llmc/cuda/matmul.cuh,
   gemm_bf16 with beta = 1 and the bias epilogue).
   Layout: ta != 0 means A is stored (K,M) with leading dimension lda (else
   (M,K)); likewise tb for B ((N,K) stored, else (K,N)); C (M,N) with ldc.
   Primitives are created once per (shape, transposes, leading dimensions,
   bias, accumulate) and cached; oneDNN threads them with its own OpenMP
   threads, so call it from serial code, never inside a parallel region.
   The scratchpad is user-managed: one buffer shared by all primitives (the
   calls are serial), grown to the largest need, counted by
   cpu_gemm_internal_bytes(). Results are bitwise reproducible for a fixed
   thread count. A oneDNN failure (a bug or an unsupported machine) prints
   one "error:" line and exits with code 2. */
#define CPU_GEMM_CACHE 128

typedef struct {
    int valid;
    int ta, tb, M, N, K, lda, ldb, ldc, has_bias, accumulate; /* key */
    dnnl_primitive_t prim;
    dnnl_memory_t mA, mB, mC, mbias, mscratch;
    size_t scratch_bytes;
} CpuGemmPlan;

static struct {
    int ready;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    CpuGemmPlan cache[CPU_GEMM_CACHE];
    int next;                    /* round-robin eviction */
    void* scratch;               /* shared user scratchpad */
    size_t scratch_bytes;
    const char* impl;            /* implementation of the last plan built */
} cpu_gemm_state;

static void cpu_gemm_check(dnnl_status_t s, const char* what) {
    if (s != dnnl_success) {
        fprintf(stderr, "error: oneDNN %s failed with status %d\n", what, (int)s);
        exit(2);
    }
}

static void cpu_gemm_init(void) {
    if (cpu_gemm_state.ready) return;
    cpu_gemm_check(dnnl_engine_create(&cpu_gemm_state.engine, dnnl_cpu, 0), "engine_create");
    cpu_gemm_check(dnnl_stream_create(&cpu_gemm_state.stream, cpu_gemm_state.engine, dnnl_stream_default_flags), "stream_create");
    cpu_gemm_state.ready = 1;
}

/* bytes of the shared scratchpad (memory outside the ledger) */
static inline unsigned long long cpu_gemm_internal_bytes(void) { return cpu_gemm_state.scratch_bytes; }

static void cpu_gemm_plan_destroy(CpuGemmPlan* p) {
    if (!p->valid) return;
    dnnl_primitive_destroy(p->prim);
    dnnl_memory_destroy(p->mA);
    dnnl_memory_destroy(p->mB);
    dnnl_memory_destroy(p->mC);
    if (p->mbias) dnnl_memory_destroy(p->mbias);
    dnnl_memory_destroy(p->mscratch);
    p->valid = 0;
}

/* 2-D bf16 memory descriptor of a (rows, cols) matrix stored row-major with
   leading dimension ld, or transposed (stored (cols, rows)) if t */
static void cpu_gemm_md(dnnl_memory_desc_t* md, int rows, int cols, int ld, int t) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {t ? 1 : ld, t ? ld : 1};
    cpu_gemm_check(dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_bf16, strides), "memory_desc_init");
}

static void cpu_gemm_plan_build(CpuGemmPlan* p) {
    dnnl_memory_desc_t a, b, c, bias;
    cpu_gemm_md(&a, p->M, p->K, p->lda, p->ta);
    cpu_gemm_md(&b, p->K, p->N, p->ldb, p->tb);
    cpu_gemm_md(&c, p->M, p->N, p->ldc, 0);
    cpu_gemm_md(&bias, 1, p->N, p->N, 0);
    dnnl_matmul_desc_t desc;
    cpu_gemm_check(dnnl_matmul_desc_init(&desc, &a, &b, p->has_bias ? &bias : NULL, &c), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    cpu_gemm_check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    cpu_gemm_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    dnnl_post_ops_t po = NULL;
    if (p->accumulate) {
        cpu_gemm_check(dnnl_post_ops_create(&po), "post_ops_create");
        cpu_gemm_check(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
        cpu_gemm_check(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    dnnl_primitive_desc_t pd;
    cpu_gemm_check(dnnl_primitive_desc_create(&pd, &desc, attr, cpu_gemm_state.engine, NULL), "matmul primitive_desc_create");
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    const char* impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success) cpu_gemm_state.impl = impl;
    const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    cpu_gemm_check(dnnl_primitive_create(&p->prim, pd), "primitive_create");
    dnnl_engine_t e = cpu_gemm_state.engine;
    cpu_gemm_check(dnnl_memory_create(&p->mA, &a, e, DNNL_MEMORY_NONE), "memory_create");
    cpu_gemm_check(dnnl_memory_create(&p->mB, &b, e, DNNL_MEMORY_NONE), "memory_create");
    cpu_gemm_check(dnnl_memory_create(&p->mC, &c, e, DNNL_MEMORY_NONE), "memory_create");
    p->mbias = NULL;
    if (p->has_bias) cpu_gemm_check(dnnl_memory_create(&p->mbias, &bias, e, DNNL_MEMORY_NONE), "memory_create");
    cpu_gemm_check(dnnl_memory_create(&p->mscratch, smd, e, DNNL_MEMORY_NONE), "memory_create");
    dnnl_primitive_desc_destroy(pd);
    if (p->scratch_bytes > cpu_gemm_state.scratch_bytes) {
        free(cpu_gemm_state.scratch);
        size_t n = (p->scratch_bytes + 63) / 64 * 64;
        cpu_gemm_state.scratch = aligned_alloc(64, n);
        if (!cpu_gemm_state.scratch) {
            fprintf(stderr, "error: out of memory: cannot allocate %zu bytes of oneDNN matmul scratchpad\n", n);
            exit(1);
        }
        cpu_gemm_state.scratch_bytes = n;
    }
}

static void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, const floatX* A, int lda,
                          const floatX* B, int ldb, int accumulate, floatX* C, int ldc,
                          const floatX* bias) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty sum: C = bias (+ C) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float v = accumulate ? ldx(C[(size_t)i * ldc + j]) : 0.0f;
                C[(size_t)i * ldc + j] = stx(v + (bias ? ldx(bias[j]) : 0.0f));
            }
        return;
    }
    cpu_gemm_init();
    int has_bias = bias != NULL;
    CpuGemmPlan* p = NULL;
    for (int i = 0; i < CPU_GEMM_CACHE; i++) {
        CpuGemmPlan* q = &cpu_gemm_state.cache[i];
        if (q->valid && q->ta == ta && q->tb == tb && q->M == M && q->N == N && q->K == K &&
            q->lda == lda && q->ldb == ldb && q->ldc == ldc && q->has_bias == has_bias &&
            q->accumulate == accumulate) { p = q; break; }
    }
    if (!p) {
        p = &cpu_gemm_state.cache[cpu_gemm_state.next];
        cpu_gemm_state.next = (cpu_gemm_state.next + 1) % CPU_GEMM_CACHE;
        cpu_gemm_plan_destroy(p);
        p->ta = ta; p->tb = tb; p->M = M; p->N = N; p->K = K; p->lda = lda; p->ldb = ldb;
        p->ldc = ldc; p->has_bias = has_bias; p->accumulate = accumulate;
        cpu_gemm_plan_build(p);
        p->valid = 1;
    }
    cpu_gemm_check(dnnl_memory_set_data_handle(p->mA, (void*)A), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(p->mB, (void*)B), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(p->mC, (void*)C), "set_data_handle");
    cpu_gemm_check(dnnl_memory_set_data_handle(p->mscratch, cpu_gemm_state.scratch), "set_data_handle");
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p->mA}, {DNNL_ARG_WEIGHTS, p->mB}, {DNNL_ARG_DST, p->mC},
                               {DNNL_ARG_SCRATCHPAD, p->mscratch}, {DNNL_ARG_BIAS, p->mbias}};
    if (has_bias) cpu_gemm_check(dnnl_memory_set_data_handle(p->mbias, (void*)bias), "set_data_handle");
    cpu_gemm_check(dnnl_primitive_execute(p->prim, cpu_gemm_state.stream, has_bias ? 5 : 4, args), "matmul execute");
    cpu_gemm_check(dnnl_stream_wait(cpu_gemm_state.stream), "stream_wait");
}

/* dbias (OC) += sum over the N rows of dout (N,OC): OC split among
   threads, rows in order, summed in double, one rounding per element. */
static inline void cpu_bias_backward(floatX* dbias, const floatX* dout, int N, int OC) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)OC, ith, nth, 16, &lo, &hi);
        if (hi > lo) {
            size_t w = hi - lo;
            double* acc = (double*)calloc(w, sizeof(double));
            for (int n = 0; n < N; n++) {
                const floatX* d = dout + (size_t)n * OC + lo;
#pragma omp simd
                for (size_t j = 0; j < w; j++) acc[j] += ldx(d[j]);
            }
            for (size_t j = 0; j < w; j++) dbias[lo + j] = stx(ldx(dbias[lo + j]) + (float)acc[j]);
            free(acc);
        }
    }
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
   Writes out (no accumulation): one bf16 rounding per element. */
static inline void matmul_forward(floatX* out, const floatX* inp,
                                  const floatX* weight, const floatX* bias,
                                  int N, int C, int OC) {
    cpu_gemm_bf16(0, 1, N, OC, C, inp, C, weight, C, 0, out, OC, bias);
}

/* Backward of matmul_forward, all three accumulate, one rounding each:
     dinp (N,C)     += dout (N,OC) @ weight (OC,C)       (skipped if NULL)
     dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)     += sum over the N rows of dout      (skipped if NULL) */
static inline void matmul_backward(floatX* dinp, floatX* dweight,
                                   floatX* dbias, const floatX* dout,
                                   const floatX* inp, const floatX* weight,
                                   int N, int C, int OC) {
    if (dinp) cpu_gemm_bf16(0, 0, N, C, OC, dout, OC, weight, C, 1, dinp, C, NULL);
    cpu_gemm_bf16(1, 0, OC, C, N, dout, OC, inp, C, 1, dweight, C, NULL);
    if (dbias) cpu_bias_backward(dbias, dout, N, OC);
}

#else /* fp32 program */

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
   Writes out (no accumulation). One parallel region: each thread sets its
   slice of out to the bias and multiplies into it (cpu_sgemm_part). */
static inline void matmul_forward(floatX* out, const floatX* inp,
                                  const floatX* weight, const floatX* bias,
                                  int N, int C, int OC) {
    cpu_blas_init();
    float beta = bias ? 1.0f : 0.0f;
#ifdef LLMC_BLAS_THREADED
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, sizeof(float) * OC);
    }
    cpu_sgemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
#else
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        cpu_sgemm_part(ith, nth, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, beta, out,
                       OC, bias);
    }
#endif
}

/* Backward of matmul_forward, all three accumulate:
     dinp (N,C)     += dout (N,OC) @ weight (OC,C)       (skipped if NULL)
     dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)     += sum over the N rows of dout      (skipped if NULL)
   One parallel region, no barrier inside: each thread does its slice of
   dinp, then its slice of dweight (cpu_sgemm_part), then its columns of
   dbias (summed over rows in order, in double). */
static inline void matmul_backward(floatX* dinp, floatX* dweight,
                                   floatX* dbias, const floatX* dout,
                                   const floatX* inp, const floatX* weight,
                                   int N, int C, int OC) {
    cpu_blas_init();
#ifdef LLMC_BLAS_THREADED
    if (dinp) cpu_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    cpu_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
#endif
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
#ifndef LLMC_BLAS_THREADED
        if (dinp)
            cpu_sgemm_part(ith, nth, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f,
                           dinp, C, NULL);
        cpu_sgemm_part(ith, nth, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight,
                       C, NULL);
#endif
        size_t lo, hi;
        cpu_split_range((size_t)OC, ith, nth, 16, &lo, &hi);
        if (dbias && hi > lo) {
            size_t w = hi - lo;
            double* acc = (double*)calloc(w, sizeof(double));
            for (int n = 0; n < N; n++) {
                const floatX* d = dout + (size_t)n * OC + lo;
#pragma omp simd
                for (size_t j = 0; j < w; j++) acc[j] += ldx(d[j]);
            }
            for (size_t j = 0; j < w; j++) dbias[lo + j] = stx(ldx(dbias[lo + j]) + (float)acc[j]);
            free(acc);
        }
    }
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_H */
