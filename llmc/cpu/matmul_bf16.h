/*
 * llmc/cpu/matmul_bf16.h -- the bf16 program's matrix products on oneDNN:
 * cpu_gemm_bf16 (the linear layers, for matmul.h) and cpu_gemm_bf16_prim
 * (attention's batched products, for attention.h), their two paths (the
 * bf16 primitive and the fp32-copy path), the shape classes whose path is
 * chosen separately and the state the choice sets (cpu_gemm_apply: from
 * matmul_choice.h's calibration, agreed over the ranks by backend.h), the
 * primitive cache and the scratch buffers. Empty in the fp32 program.
 * Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_BF16_H
#define LLMC_CPU_MATMUL_BF16_H

#include "common.h"

#ifdef LLMC_BF16
/* cpu_gemm_bf16() is the one entry point of the bf16 program's linear
   layers: row-major C (M,N) = op(A) (M,K) op(B) (K,N) [+ bias (N), broadcast
   over rows] [+ C], on bf16 storage with fp32 accumulation. The sum over K,
   the bias and the old value of C (the `accumulate` flag) are added in fp32
   and the result is rounded ONCE to bf16 (round to nearest even), as
   cuBLASLt does in the CUDA program (llmc/cuda/matmul.cuh, gemm_bf16 with
   beta = 1 and the bias epilogue). Two implementations ("paths"):
   - "primitive": oneDNN's bf16 matmul primitive (AMX tiles at the level
     amx, vdpbf16ps at avx512_bf16, emulated on fp32 FMAs at avx512; oneDNN
     2.6 has none below avx512_core), bias in the primitive, the old C
     through the sum post-op. Primitives are created once per (batch,
     shape, strides, bias, accumulate, scale) and cached; oneDNN threads
     them with its own OpenMP threads. User-managed scratchpad: one buffer
     shared by all primitives (the calls are serial).
   - "fp32" (the fp32-copy path): the same product on exact fp32 copies of
     the bf16 operands, by the fp32 program's sgemm (oneDNN's dnnl_sgemm),
     split among the OpenMP threads as cpu_sgemm_par splits it, in panels;
     the fp32 sum, bias and old C are rounded once in the panel's epilogue.
   Both add exact products of the same bf16 values in fp32 and round once;
   they differ only in the order of the fp32 sums (docs/precision.md).
   Which path runs is chosen per shape class (CpuMmClass below: forward,
   dinp, dweight of the blocks and of the LM head, and attention's
   products) by measuring both on this CPU (matmul_choice.h: the
   calibration file, or a short measurement at start-up), agreed over the
   ranks (backend_agree_kernels, backend.h), and applied here
   (cpu_gemm_apply). LLMC_BF16_MATMUL=primitive|fp32 forces one path for
   every class; the primitive needs the level avx512 or above
   (cpu_gemm_choose).
   Layout: ta != 0 means A is stored (K,M) with leading dimension lda (else
   (M,K)); likewise tb for B ((N,K) stored, else (K,N)); C (M,N) with ldc.
   Call it from serial code, never inside a parallel region. Scratch (the
   primitive's scratchpad, the fp32 copies) is kept and grown to the
   largest need, counted by cpu_gemm_internal_bytes(). Results are bitwise
   reproducible for a fixed thread count and path. A oneDNN failure (a bug
   or an unsupported machine) prints one "error:" line and exits with code
   2; an allocation failure prints "error: out of memory" and exits with
   code 1. */

/* The shape classes whose path is chosen separately: the forward, dinp and
   dweight products of the blocks' linear layers (qkv, attproj, fc,
   fcproj) and of the LM head (the tied wte, chunk by chunk: its shapes are
   N x C x vocabulary chunk, far wider than the blocks'), and attention's
   batched T x T products (forward and backward together). */
typedef enum { CPU_MM_FWD = 0, CPU_MM_DINP, CPU_MM_DWEIGHT, CPU_MM_LM_FWD, CPU_MM_LM_DINP, CPU_MM_LM_DWEIGHT, CPU_MM_ATTENTION,
               CPU_MM_NUM } CpuMmClass;
static const char* const cpu_mm_names[CPU_MM_NUM] = {"fwd", "dinp", "dweight", "lm_fwd", "lm_dinp", "lm_dweight", "attention"};

/* How the paths in use were decided (CpuGemmChoice.how). */
enum { CPU_GEMM_BY_RULE = 0,      /* no agreed choice (kernel tests, benches): the level's rule, amx -> primitive */
       CPU_GEMM_BY_ENV,           /* LLMC_BF16_MATMUL forces one path */
       CPU_GEMM_BY_UNAVAILABLE,   /* a rank's level is below avx512: the primitive cannot run there */
       CPU_GEMM_BY_FILE,          /* the calibration file of this CPU and build (matmul_choice.h) */
       CPU_GEMM_BY_MEASURED,      /* measured at start-up by rank 0 (no valid calibration file), then written */
       CPU_GEMM_BY_STATE,         /* -y 1: the paths the resumed state recorded (header word 26, llmc/state.h) */
       CPU_GEMM_BY_INVARIANT };   /* --invariant 1: one path per class whatever the thread count, nothing measured (matmul_choice.h) */

/* One decision about the paths, as rank 0 takes it and broadcasts it (a
   plain struct: the broadcast copies its bytes). fp32[k]: 1 = the
   fp32-copy path for class k, 0 = the primitive. rate[0][k], rate[1][k]:
   the measured GFLOP/s of the primitive and of the fp32-copy path on class
   k (0: not measured). */
typedef struct {
    int fp32[CPU_MM_NUM];
    float rate[2][CPU_MM_NUM];
    int how;                 /* CPU_GEMM_BY_* */
    int threads;             /* OpenMP threads of the measurement (0: none) */
    int provisional;         /* 1: measured at a start-up (one timed call per shape), not by --calibrate-matmul: the next calibration replaces it */
    char impl[64];           /* oneDNN's implementation of the bf16 primitive, e.g. brg:avx512_core_bf16 ("": none) */
    char where[1024];        /* the calibration file and what was done with it */
} CpuGemmChoice;

#define CPU_GEMM_CACHE 128

typedef struct {
    int valid;
    /* key: batch, shape, element strides (batch, row, column) of op(A)
       (M,K), op(B) (K,N) and C (M,N), bias, accumulate, scale */
    int batch, M, N, K, has_bias, accumulate;
    long long sa[3], sb[3], sc[3];
    float alpha;
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
    int fp32[CPU_MM_NUM];        /* per class: 1 = the "fp32" path, 0 = the primitive (see above) */
    int lm_head;                 /* the calls now are the LM head's (cpu_gemm_lm_head) */
    CpuGemmChoice choice;        /* how the paths were decided (cpu_gemm_apply) */
    int applied;                 /* a decision was applied (else cpu_gemm_init applies the standalone default) */
    float* shared;               /* fp32 path: the operand every thread reads */
    size_t shared_cap;           /* (floats) */
    float* tbuf[256];            /* fp32 path: per-thread panel buffers */
    size_t tcap[256];            /* (floats) */
    float* att_buf;              /* primitive path: attention's packed heads */
    size_t att_cap;              /* (floats) */
} cpu_gemm_state;

static void cpu_gemm_check(dnnl_status_t s, const char* what) {
    if (s != dnnl_success) {
        fprintf(stderr, "error: oneDNN %s failed with status %d\n", what, (int)s);
        exit(2);
    }
}

/* What LLMC_BF16_MATMUL asks for on this rank: 1 = "fp32" forced, 0 =
   "primitive" forced, 2 = unset (the paths are chosen by measurement,
   matmul_choice.h); -1 with a message in err (errlen bytes) for a value
   that is not one, or the primitive forced on a CPU where oneDNN 2.6 has
   no bf16 matmul (below avx512_core). Every rank calls it at start-up
   (backend_agree_kernels, backend_init) so that the error ends every rank;
   cpu_gemm_init calls it again and exits on the same error. */
static inline int cpu_gemm_choose(char* err, size_t errlen) {
    const char* e = getenv("LLMC_BF16_MATMUL");
    CpuIsa level = cpu_isa();
    if (e && !strcmp(e, "fp32")) return 1;
    if (e && !strcmp(e, "primitive")) {
        if (level < CPU_ISA_AVX512) {
            snprintf(err, errlen, "LLMC_BF16_MATMUL=primitive: oneDNN's bf16 matmul primitive needs AVX512_CORE "
                     "(AVX-512 F/BW/VL/DQ); this CPU runs at level %s%s: unset LLMC_BF16_MATMUL or use LLMC_BF16_MATMUL=fp32",
                     cpu_isa_names[level], cpu_isa_state.cap_given && cpu_isa_state.cap < cpu_isa_state.detected ? " (capped by LLMC_CPU_ISA)" : "");
            return -1;
        }
        return 0;
    }
    if (e && e[0]) { snprintf(err, errlen, "LLMC_BF16_MATMUL=%s: must be primitive or fp32 (or unset: measured per shape class)", e); return -1; }
    return 2;
}

/* Sets the paths of every class from a decision (rank 0's, broadcast:
   backend_agree_kernels; or the standalone default of cpu_gemm_init). */
static inline void cpu_gemm_apply(const CpuGemmChoice* c) {
    cpu_gemm_state.choice = *c;
    cpu_gemm_state.applied = 1;
    for (int k = 0; k < CPU_MM_NUM; k++) cpu_gemm_state.fp32[k] = c->fp32[k] ? 1 : 0;
}

/* Every class on one path (1: fp32, 0: primitive): LLMC_BF16_MATMUL, and
   the kernel tests and benches that run both paths. */
static inline void cpu_gemm_set_all(int fp32) {
    for (int k = 0; k < CPU_MM_NUM; k++) cpu_gemm_state.fp32[k] = fp32 ? 1 : 0;
}

static void cpu_gemm_init(void) {
    if (cpu_gemm_state.ready) return;
    char err[320] = "";
    int f = cpu_gemm_choose(err, sizeof(err));
    if (f < 0) { fprintf(stderr, "error: %s\n", err); exit(1); }
    cpu_gemm_check(dnnl_engine_create(&cpu_gemm_state.engine, dnnl_cpu, 0), "engine_create");
    cpu_gemm_check(dnnl_stream_create(&cpu_gemm_state.stream, cpu_gemm_state.engine, dnnl_stream_default_flags), "stream_create");
    cpu_gemm_state.ready = 1;
    if (cpu_gemm_state.applied) return;   /* already decided (backend_agree_kernels) */
    /* no agreed choice (a program without the trainer's start-up: the
       kernel tests, the benches): LLMC_BF16_MATMUL, else the level's rule */
    CpuGemmChoice c;
    memset(&c, 0, sizeof(c));
    c.how = f == 2 ? CPU_GEMM_BY_RULE : CPU_GEMM_BY_ENV;
    int fp32 = f == 2 ? cpu_isa() != CPU_ISA_AMX : f;
    for (int k = 0; k < CPU_MM_NUM; k++) c.fp32[k] = fp32;
    snprintf(c.where, sizeof(c.where), "%s", f == 2 ? "no agreed choice: the rule (primitive at amx, else fp32)" : "LLMC_BF16_MATMUL");
    cpu_gemm_apply(&c);
}

/* The path of class k: 1 = fp32, 0 = primitive. */
static inline int cpu_gemm_path(int k) {
    cpu_gemm_init();
    return cpu_gemm_state.fp32[k];
}

/* the paths in use: "primitive" or "fp32" when every class runs one,
   "per class" when they differ (see above) */
static inline const char* cpu_gemm_mode(void) {
    cpu_gemm_init();
    int nf = 0;
    for (int k = 0; k < CPU_MM_NUM; k++) nf += cpu_gemm_state.fp32[k];
    return nf == CPU_MM_NUM ? "fp32" : nf == 0 ? "primitive" : "per class";
}

/* The calls that follow are the LM head's (1) or the blocks' (0): which
   classes matmul_forward / matmul_backward take (backend_matmul_lm_head). */
static inline void cpu_gemm_lm_head(int on) { cpu_gemm_state.lm_head = on ? 1 : 0; }

/* the scratchpads of --invariant 1's tile plans (matmul_invariant.h) */
static inline unsigned long long cpu_inv_prim_bytes(void);

/* bytes of matmul scratch (memory outside the ledger) */
static inline unsigned long long cpu_gemm_internal_bytes(void) {
    unsigned long long b = cpu_gemm_state.scratch_bytes + cpu_gemm_state.shared_cap * sizeof(float) +
                           cpu_gemm_state.att_cap * sizeof(float);
    for (int i = 0; i < 256; i++) b += cpu_gemm_state.tcap[i] * sizeof(float);
    return b + cpu_inv_prim_bytes();
}

/* *buf grown to hold n floats (64-byte aligned); exits on failure */
static float* cpu_gemm_grow(float** buf, size_t* cap, size_t n) {
    if (n > *cap) {
        free(*buf);
        size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
        *buf = (float*)aligned_alloc(64, bytes);
        if (!*buf) {
            fprintf(stderr, "error: out of memory: cannot allocate %zu bytes of matmul scratch\n", bytes);
            exit(1);
        }
        *cap = n;
    }
    return *buf;
}

/* dst (R, W) packed fp32 <- rows r0.. and columns c0.. of a stored bf16
   matrix with leading dimension ld (exact) */
static inline void cpu_gemm_cvt(float* dst, const floatX* src, int r0, int R, int c0, int W, int ld) {
    for (int i = 0; i < R; i++) {
        const floatX* s = src + (size_t)(r0 + i) * ld + c0;
        float* d = dst + (size_t)i * W;
#pragma omp simd
        for (int j = 0; j < W; j++) d[j] = ldx(s[j]);
    }
}

/* C rows (R, W) at C + c0 (ldc) <- bf16(acc (R, W packed) + bias[c0..] +
   old C if accumulate): the one rounding of the fp32 path */
static inline void cpu_gemm_epilogue(floatX* C, int ldc, int r0, int R, int c0, int W, const float* acc,
                                     const floatX* bias, int accumulate) {
    for (int i = 0; i < R; i++) {
        floatX* c = C + (size_t)(r0 + i) * ldc + c0;
        const float* a = acc + (size_t)i * W;
        if (bias && accumulate) {
#pragma omp simd
            for (int j = 0; j < W; j++) c[j] = stx(a[j] + ldx(bias[c0 + j]) + ldx(c[j]));
        } else if (bias) {
#pragma omp simd
            for (int j = 0; j < W; j++) c[j] = stx(a[j] + ldx(bias[c0 + j]));
        } else if (accumulate) {
#pragma omp simd
            for (int j = 0; j < W; j++) c[j] = stx(a[j] + ldx(c[j]));
        } else {
#pragma omp simd
            for (int j = 0; j < W; j++) c[j] = stx(a[j]);
        }
    }
}

/* panel of the split dimension (rows of op(A) or columns of op(B)) and
   tile of K in the fp32 path: a converted panel tile holds at most
   CPU_GEMM_PANEL x CPU_GEMM_KTILE floats (2 MB); a long K is summed tile by
   tile into the panel's fp32 product (sgemm with beta = 1), still rounded
   to bf16 once, after the last tile */
#define CPU_GEMM_PANEL 256
#define CPU_GEMM_KTILE 2048

/* the "fp32" implementation (see above): the larger output dimension (M or
   N) is split among threads as in cpu_sgemm_part; the other operand is
   converted once, whole; each thread converts its panels of the split
   operand (K tile by K tile), multiplies them with a single-threaded sgemm
   into fp32 and rounds once in the epilogue. */
static void cpu_gemm_bf16_fp32(int ta, int tb, int M, int N, int K, const floatX* A, int lda,
                               const floatX* B, int ldb, int accumulate, floatX* C, int ldc,
                               const floatX* bias) {
    cpu_blas_init();
    const int split_m = M >= N;
    /* the shared operand as stored: rows x cols with ld */
    const floatX* S = split_m ? B : A;
    const int Sr = split_m ? (tb ? N : K) : (ta ? K : M);
    const int Sc = split_m ? (tb ? K : N) : (ta ? M : K);
    const int Sld = split_m ? ldb : lda;
    /* whether K runs along the stored rows of the shared operand */
    const int s_k_rows = split_m ? !tb : ta;
    float* Sf = cpu_gemm_grow(&cpu_gemm_state.shared, &cpu_gemm_state.shared_cap, (size_t)Sr * Sc);
    const int whole = (double)M * N * K < CPU_GEMM_SPLIT_MIN;
    const int KT = K < CPU_GEMM_KTILE ? K : CPU_GEMM_KTILE;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int r = 0; r < Sr; r++) cpu_gemm_cvt(Sf + (size_t)r * Sc, S, r, 1, 0, Sc, Sld);
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo = 0, hi = 0;
        if (whole || nth <= 1) {
            if (ith == 0) hi = (size_t)(split_m ? M : N);
        } else {
            cpu_split_range((size_t)(split_m ? M : N), ith, nth, 64, &lo, &hi);
        }
        if (hi > lo && ith < 256) {
            const int P = CPU_GEMM_PANEL, other = split_m ? N : M;
            size_t need = (size_t)P * KT + (size_t)P * other;
            float* buf = cpu_gemm_grow(&cpu_gemm_state.tbuf[ith], &cpu_gemm_state.tcap[ith], need);
            float* Pf = buf;                     /* the converted panel tile */
            float* Cf = buf + (size_t)P * KT;    /* the panel's fp32 product */
            for (int p0 = (int)lo; p0 < (int)hi; p0 += P) {
                int n = (int)hi - p0 < P ? (int)hi - p0 : P;
                for (int k0 = 0; k0 < K; k0 += KT) {
                    int kn = K - k0 < KT ? K - k0 : KT;
                    float beta = k0 == 0 ? 0.0f : 1.0f;
                    const float* Sk = Sf + (s_k_rows ? (size_t)k0 * Sc : (size_t)k0);
                    if (split_m) { /* rows p0..p0+n of op(A), K tile k0..k0+kn */
                        if (!ta) cpu_gemm_cvt(Pf, A, p0, n, k0, kn, lda);
                        else cpu_gemm_cvt(Pf, A, k0, kn, p0, n, lda);
                        cpu_sgemm(ta, tb, n, N, kn, 1.0f, Pf, ta ? n : kn, Sk, Sc, beta, Cf, N);
                    } else { /* columns p0..p0+n of op(B), K tile k0..k0+kn */
                        if (tb) cpu_gemm_cvt(Pf, B, p0, n, k0, kn, ldb);
                        else cpu_gemm_cvt(Pf, B, k0, kn, p0, n, ldb);
                        cpu_sgemm(ta, tb, M, n, kn, 1.0f, Sk, Sc, Pf, tb ? kn : n, beta, Cf, n);
                    }
                }
                if (split_m) cpu_gemm_epilogue(C, ldc, p0, n, 0, N, Cf, bias, accumulate);
                else cpu_gemm_epilogue(C, ldc, 0, M, p0, n, Cf, bias, accumulate);
            }
        }
    }
}

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

/* bf16 memory descriptor of a batch of (rows, cols) matrices with element
   strides st (batch, row, column); 2-D when batch == 1 */
static void cpu_gemm_md(dnnl_memory_desc_t* md, int batch, int rows, int cols, const long long* st) {
    dnnl_dims_t dims = {batch, rows, cols}, strides = {st[0], st[1], st[2]};
    if (batch <= 1) {
        dnnl_dims_t d2 = {rows, cols}, s2 = {st[1], st[2]};
        cpu_gemm_check(dnnl_memory_desc_init_by_strides(md, 2, d2, dnnl_bf16, s2), "memory_desc_init");
        return;
    }
    cpu_gemm_check(dnnl_memory_desc_init_by_strides(md, 3, dims, dnnl_bf16, strides), "memory_desc_init");
}

/* The primitive descriptor of plan p's product (its key fields: batch,
   shape, strides, bias, accumulate, scale), with its memory descriptors;
   the caller destroys it. Shared by the plan and by the scratchpad's
   prediction (cpu_gemm_prim_scratch_query), so both see one descriptor. */
static dnnl_primitive_desc_t cpu_gemm_pd_create(const CpuGemmPlan* p, dnnl_memory_desc_t* a, dnnl_memory_desc_t* b,
                                                dnnl_memory_desc_t* c, dnnl_memory_desc_t* bias) {
    long long sbias[3] = {p->N, p->N, 1};
    cpu_gemm_md(a, p->batch, p->M, p->K, p->sa);
    cpu_gemm_md(b, p->batch, p->K, p->N, p->sb);
    cpu_gemm_md(c, p->batch, p->M, p->N, p->sc);
    cpu_gemm_md(bias, 1, 1, p->N, sbias);
    dnnl_matmul_desc_t desc;
    cpu_gemm_check(dnnl_matmul_desc_init(&desc, a, b, p->has_bias ? bias : NULL, c), "matmul_desc_init");
    dnnl_primitive_attr_t attr;
    cpu_gemm_check(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    cpu_gemm_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "set_scratchpad_mode");
    if (p->alpha != 1.0f) cpu_gemm_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &p->alpha), "set_output_scales");
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
    return pd;
}

static void cpu_gemm_plan_build(CpuGemmPlan* p) {
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_primitive_desc_t pd = cpu_gemm_pd_create(p, &a, &b, &c, &bias);
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

/* oneDNN's scratchpad for one primitive call (bytes, as cpu_gemm_plan_build
   allocates it: 64-byte rounded), from its primitive descriptor alone (no
   primitive is created, nothing runs): the same key as cpu_gemm_bf16_prim's
   (batch, M, N, K, alpha, element strides sa/sb/sc, bias, accumulate). */
static size_t cpu_gemm_prim_scratch_query(int batch, int M, int N, int K, float alpha, const long long* sa, const long long* sb,
                                          const long long* sc, int has_bias, int accumulate) {
    CpuGemmPlan q;
    memset(&q, 0, sizeof(q));
    q.batch = batch; q.M = M; q.N = N; q.K = K; q.alpha = alpha; q.has_bias = has_bias; q.accumulate = accumulate;
    memcpy(q.sa, sa, sizeof q.sa); memcpy(q.sb, sb, sizeof q.sb); memcpy(q.sc, sc, sizeof q.sc);
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_primitive_desc_t pd = cpu_gemm_pd_create(&q, &a, &b, &c, &bias);
    const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t n = smd ? dnnl_memory_desc_get_size(smd) : 0;
    dnnl_primitive_desc_destroy(pd);
    return (n + 63) / 64 * 64;
}

/* the same for a 2-D call as cpu_gemm_bf16 makes it (ta, tb, leading dimensions) */
static size_t cpu_gemm_prim_scratch_query2(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int has_bias, int accumulate) {
    long long sa[3] = {0, ta ? 1 : lda, ta ? lda : 1};
    long long sb[3] = {0, tb ? 1 : ldb, tb ? ldb : 1};
    long long sc[3] = {0, ldc, 1};
    return cpu_gemm_prim_scratch_query(1, M, N, K, 1.0f, sa, sb, sc, has_bias, accumulate);
}

/* oneDNN's bf16 matmul primitive on a batch of products:
     C[b] (M,N) = alpha op(A)[b] (M,K) op(B)[b] (K,N) [+ bias (N)] [+ C[b]]
   with element strides sa, sb, sc = (batch, row, column) of the logical
   op(A), op(B), C; fp32 accumulation, scaling and sum, one rounding. From
   serial code (oneDNN threads it). */
static void cpu_gemm_bf16_prim(int batch, int M, int N, int K, float alpha, const floatX* A, const long long* sa,
                               const floatX* B, const long long* sb, int accumulate, floatX* C,
                               const long long* sc, const floatX* bias) {
    cpu_gemm_init();
    int has_bias = bias != NULL;
    CpuGemmPlan* p = NULL;
    for (int i = 0; i < CPU_GEMM_CACHE; i++) {
        CpuGemmPlan* q = &cpu_gemm_state.cache[i];
        if (q->valid && q->batch == batch && q->M == M && q->N == N && q->K == K && q->has_bias == has_bias &&
            q->accumulate == accumulate && q->alpha == alpha && !memcmp(q->sa, sa, sizeof q->sa) &&
            !memcmp(q->sb, sb, sizeof q->sb) && !memcmp(q->sc, sc, sizeof q->sc)) { p = q; break; }
    }
    if (!p) {
        p = &cpu_gemm_state.cache[cpu_gemm_state.next];
        cpu_gemm_state.next = (cpu_gemm_state.next + 1) % CPU_GEMM_CACHE;
        cpu_gemm_plan_destroy(p);
        p->batch = batch; p->M = M; p->N = N; p->K = K; p->has_bias = has_bias; p->accumulate = accumulate;
        p->alpha = alpha;
        memcpy(p->sa, sa, sizeof p->sa); memcpy(p->sb, sb, sizeof p->sb); memcpy(p->sc, sc, sizeof p->sc);
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

/* cpu_gemm_bf16 on the path of class cls (CpuMmClass; see the top) */
static void cpu_gemm_bf16(int cls, int ta, int tb, int M, int N, int K, const floatX* A, int lda,
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
    if (cpu_gemm_path(cls)) {
        cpu_gemm_bf16_fp32(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, bias);
        return;
    }
    long long sa[3] = {0, ta ? 1 : lda, ta ? lda : 1};
    long long sb[3] = {0, tb ? 1 : ldb, tb ? ldb : 1};
    long long sc[3] = {0, ldc, 1};
    cpu_gemm_bf16_prim(1, M, N, K, 1.0f, A, sa, B, sb, accumulate, C, sc, bias);
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_BF16_H */
