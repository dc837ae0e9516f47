/*
 * llmc/cpu/matmul.h -- the linear layer (matrix product + bias), forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/matmul.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include "common.h"

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
   at most). */
#define CPU_INV_BPAD 16   /* floats of padding after each row of the B copy (see cpu_inv_dweight_tree) */
static inline void cpu_inv_dweight_tree(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC,
                                        float* (*shared)(size_t n), float* (*scratch)(int ith, size_t n)) {
    cpu_blas_init();
    const int T = cpu_inv_T, nseq = N / T, no = (OC + 63) / 64, nc = (C + CPU_INV_COLS - 1) / CPU_INV_COLS;
    int levels = 1;
    while ((1 << (levels - 1)) < nseq) levels++;
    const size_t w = (size_t)64 * CPU_INV_COLS;
    const int ldb = C + CPU_INV_BPAD;
    const int fused = nseq == 1 || nseq == 2 || nseq == 4 || nseq == 8;   /* cpu_inv_tree_add */
    const int nbuf = fused ? nseq : levels + 1;
    float* inpf = shared((size_t)N * ldb);
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const floatX* x = inp + (size_t)n * C;
            float* b = inpf + (size_t)n * ldb;
#pragma omp simd
            for (int j = 0; j < C; j++) b[j] = ldx(x[j]);
        }
        float* sc = scratch(ith, (size_t)nbuf * w + (size_t)N * 64);
        float* At = sc + (size_t)nbuf * w;   /* per sequence: the row block's (ow,T) block of dout_s^T */
        int last_o0 = -1;
#pragma omp for schedule(static)
        for (int k = 0; k < no * nc; k++) {
            int o0 = (k / nc) * 64, c0 = (k % nc) * CPU_INV_COLS;
            int ow = OC - o0 < 64 ? OC - o0 : 64, cw = C - c0 < CPU_INV_COLS ? C - c0 : CPU_INV_COLS;
            if (o0 != last_o0) {   /* the tiles of one row block follow each other: packed once */
                for (int s = 0; s < nseq; s++)
                    cpu_transpose_cvt(At + (size_t)s * ow * T, T, dout + (size_t)s * T * OC + o0, OC, ow, T);
                last_o0 = o0;
            }
            size_t tw = (size_t)ow * cw;
            if (fused) {   /* every leaf kept, the tree and the add to dweight in one pass per row */
                float* L[8];
                for (int s = 0; s < nseq; s++) {
                    L[s] = sc + (size_t)s * w;
                    cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)s * ow * T, T, inpf + (size_t)s * T * ldb + c0, ldb, 0.0f, L[s], cw);
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
                cpu_sgemm(0, 0, ow, cw, T, 1.0f, At + (size_t)s * ow * T, T, inpf + (size_t)s * T * ldb + c0, ldb, 0.0f, leaf, cw);
#ifdef LLMC_BF16
#pragma omp simd
                for (size_t i = 0; i < tw; i++) leaf[i] = cpu_inv_round(leaf[i]);
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
        }
    }
}

#ifdef LLMC_BF16
/* ------------------------------------------------------------------------ */
/* bf16 program: matmuls on oneDNN (bf16 primitive, or fp32 on copies)    */

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
       CPU_GEMM_BY_MEASURED };    /* measured at start-up by rank 0 (no valid calibration file) */

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
    char where[640];         /* the calibration file and what was done with it */
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

/* bytes of matmul scratch (memory outside the ledger) */
static inline unsigned long long cpu_gemm_internal_bytes(void) {
    unsigned long long b = cpu_gemm_state.scratch_bytes + cpu_gemm_state.shared_cap * sizeof(float) +
                           cpu_gemm_state.att_cap * sizeof(float);
    for (int i = 0; i < 256; i++) b += cpu_gemm_state.tcap[i] * sizeof(float);
    return b;
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

static void cpu_gemm_plan_build(CpuGemmPlan* p) {
    dnnl_memory_desc_t a, b, c, bias;
    long long sbias[3] = {p->N, p->N, 1};
    cpu_gemm_md(&a, p->batch, p->M, p->K, p->sa);
    cpu_gemm_md(&b, p->batch, p->K, p->N, p->sb);
    cpu_gemm_md(&c, p->batch, p->M, p->N, p->sc);
    cpu_gemm_md(&bias, 1, 1, p->N, sbias);
    dnnl_matmul_desc_t desc;
    cpu_gemm_check(dnnl_matmul_desc_init(&desc, &a, &b, p->has_bias ? &bias : NULL, &c), "matmul_desc_init");
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
static void cpu_inv_dweight_bf16(floatX* dweight, const floatX* dout, const floatX* inp, int N, int C, int OC) {
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_gemm_shared_buf, cpu_gemm_thread_buf);
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

/* dbias (OC) += sum over the N rows of dout (N,OC): OC split among
   threads, rows in order, summed in double, one rounding per element. */
static inline void cpu_bias_backward(floatX* dbias, const floatX* dout, int N, int OC) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)OC, ith, nth, 16, &lo, &hi);
        if (hi > lo) cpu_column_sum_add(dbias + lo, dout + lo, N, (size_t)OC, hi - lo);
    }
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
   Writes out (no accumulation): one bf16 rounding per element. */
static inline void matmul_forward(floatX* out, const floatX* inp,
                                  const floatX* weight, const floatX* bias,
                                  int N, int C, int OC) {
    if (cpu_inv_T && N % cpu_inv_rows(cpu_inv_T) == 0) { cpu_inv_gemm_rows_bf16(out, inp, weight, bias, N, C, OC, 1, 0); return; }
    cpu_gemm_bf16(cpu_gemm_state.lm_head ? CPU_MM_LM_FWD : CPU_MM_FWD, 0, 1, N, OC, C, inp, C, weight, C, 0, out, OC, bias);
}

/* Backward of matmul_forward, all three accumulate, one rounding each:
     dinp (N,C)     += dout (N,OC) @ weight (OC,C)       (skipped if NULL)
     dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)     += sum over the N rows of dout      (skipped if NULL) */
static inline void matmul_backward(floatX* dinp, floatX* dweight,
                                   floatX* dbias, const floatX* dout,
                                   const floatX* inp, const floatX* weight,
                                   int N, int C, int OC) {
    if (cpu_inv_T && N % cpu_inv_T == 0) {   /* --invariant 1 */
        if (dinp) cpu_inv_gemm_rows_bf16(dinp, dout, weight, NULL, N, OC, C, 0, 1);
        cpu_inv_dweight_bf16(dweight, dout, inp, N, C, OC);
        if (dbias) cpu_inv_dbias(dbias, dout, N, OC);
        return;
    }
    const int lm = cpu_gemm_state.lm_head ? 3 : 0;
    if (dinp) cpu_gemm_bf16(CPU_MM_DINP + lm, 0, 0, N, C, OC, dout, OC, weight, C, 1, dinp, C, NULL);
    cpu_gemm_bf16(CPU_MM_DWEIGHT + lm, 1, 0, OC, C, N, dout, OC, inp, C, 1, dweight, C, NULL);
    if (dbias) cpu_bias_backward(dbias, dout, N, OC);
}

/* The fp32-copy path's buffers (cpu_gemm_bf16_fp32), predicted: for one
   product op(A) (M,K) x op(B) (K,N) on nth threads, the shared operand
   (the one whose output dimension is not split: N*K floats when M >= N,
   else M*K) and every working thread's panel buffer (CPU_GEMM_PANEL x
   min(K, CPU_GEMM_KTILE) + CPU_GEMM_PANEL x the other dimension; thread 0
   alone below CPU_GEMM_SPLIT_MIN flops, else the threads whose
   cpu_split_range share of the split dimension is not empty). Each buffer
   keeps the largest size it was grown to (cpu_gemm_grow): *shared and
   tcap[0..nth) take the max. Floats. */
static inline void cpu_gemm_copy_predict(size_t* shared, size_t* tcap, int nth, int M, int N, int K) {
    const int split_m = M >= N;
    size_t S = split_m ? (size_t)N * K : (size_t)M * K;
    if (S > *shared) *shared = S;
    const int whole = (double)M * N * K < CPU_GEMM_SPLIT_MIN;
    const int KT = K < CPU_GEMM_KTILE ? K : CPU_GEMM_KTILE;
    size_t need = (size_t)CPU_GEMM_PANEL * KT + (size_t)CPU_GEMM_PANEL * (size_t)(split_m ? N : M);
    size_t dim = (size_t)(split_m ? M : N);
    for (int ith = 0; ith < nth && ith < 256; ith++) {
        size_t lo = 0, hi = 0;
        if (whole || nth <= 1) { if (ith == 0) hi = dim; }
        else cpu_split_range(dim, ith, nth, 64, &lo, &hi);
        if (hi > lo && need > tcap[ith]) tcap[ith] = need;
    }
}

/* The bytes the fp32-copy path holds after a training step (or an
   evaluation's forward, eval_only) of a GPT-2 of L blocks and C channels,
   the LM head in chunks of Vc rows (the last of last_rows), `rows` = B*T
   rows per micro-step, on nth threads: every class on the fp32-copy path
   (cpu_gemm_state.fp32) contributes its products (forward: (rows, OC, Cin)
   for qkv, attproj, fc, fcproj and (rows, Vc, C) per LM-head chunk;
   backward: dinp (rows, Cin, OC) and dweight (OC, Cin, rows)). What
   cpu_gemm_copy_bytes() then reads, exactly (tests/suites/fit_details.sh). */
static inline unsigned long long cpu_gemm_copy_predict_model(int L, int C, int Vc, int last_rows, int rows, int eval_only, int nth) {
    cpu_gemm_init();
    size_t shared = 0, tcap[256];
    memset(tcap, 0, sizeof(tcap));
    const int io[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};   /* (Cin, OC) of qkv, attproj, fc, fcproj */
    const int* fp = cpu_gemm_state.fp32;
    for (int j = 0; j < 4 && L > 0; j++) {
        if (fp[CPU_MM_FWD]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, io[j][1], io[j][0]);
        if (eval_only) continue;
        if (fp[CPU_MM_DINP]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, io[j][0], io[j][1]);
        if (fp[CPU_MM_DWEIGHT]) cpu_gemm_copy_predict(&shared, tcap, nth, io[j][1], io[j][0], rows);
    }
    int vr[2] = {Vc, last_rows};
    for (int k = 0; k < 2; k++) {
        if (vr[k] <= 0) continue;
        if (fp[CPU_MM_LM_FWD]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, vr[k], C);
        if (eval_only) continue;
        if (fp[CPU_MM_LM_DINP]) cpu_gemm_copy_predict(&shared, tcap, nth, rows, C, vr[k]);
        if (fp[CPU_MM_LM_DWEIGHT]) cpu_gemm_copy_predict(&shared, tcap, nth, vr[k], C, rows);
    }
    unsigned long long b = (shared * sizeof(float) + 63) / 64 * 64;
    for (int i = 0; i < 256; i++) b += (tcap[i] * sizeof(float) + 63) / 64 * 64;
    return b;
}

/* What the fp32-copy path holds now (bytes, as allocated: 64-byte rounded). */
static inline unsigned long long cpu_gemm_copy_bytes(void) {
    unsigned long long b = cpu_gemm_state.shared_cap ? (cpu_gemm_state.shared_cap * sizeof(float) + 63) / 64 * 64 : 0;
    for (int i = 0; i < 256; i++) if (cpu_gemm_state.tcap[i]) b += (cpu_gemm_state.tcap[i] * sizeof(float) + 63) / 64 * 64;
    return b;
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
    cpu_inv_dweight_tree(dweight, dout, inp, N, C, OC, cpu_inv_shared, cpu_inv_thread_scratch);
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                   */

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
   Writes out (no accumulation). One parallel region: each thread sets its
   slice of out to the bias and multiplies into it (cpu_sgemm_part). */
static inline void matmul_forward(floatX* out, const floatX* inp,
                                  const floatX* weight, const floatX* bias,
                                  int N, int C, int OC) {
    cpu_blas_init();
    if (cpu_inv_T && N % cpu_inv_rows(cpu_inv_T) == 0) { cpu_inv_rows_gemm(out, inp, weight, bias, N, C, OC, 1, 0.0f); return; }
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
    if (cpu_inv_T && N % cpu_inv_T == 0) {
        if (dinp) cpu_inv_rows_gemm(dinp, dout, weight, NULL, N, OC, C, 0, 1.0f);
        cpu_inv_dweight(dweight, dout, inp, N, C, OC);
        if (dbias) cpu_inv_dbias(dbias, dout, N, OC);
        return;
    }
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
        if (dbias && hi > lo) cpu_column_sum_add(dbias + lo, dout + lo, N, (size_t)OC, hi - lo);
    }
}

#endif /* LLMC_BF16 */

#endif /* LLMC_CPU_MATMUL_H */
