/*
 * llmc/cpu/common.h -- what the CPU kernels share: the storage type floatX,
 * OpenMP threading helpers, the BLAS entry point (CBLAS, or oneDNN's
 * dnnl_sgemm with -DLLMC_USE_DNNL) and vectorizable exp/tanh. Each operation
 * has its own header beside this one (encoder.h, layernorm.h, matmul.h,
 * attention.h, gelu.h, fused_classifier.h, global_norm.h, adamw.h), the
 * twin of the CUDA kernel header of the same name in llmc/cuda/.
 *
 * Conventions (all kernels):
 *   - row-major; N = B*T rows; floatX: float, or bf16 with -DLLMC_BF16 (below).
 *   - every backward ACCUMULATES (+=) into every gradient it outputs; the
 *     caller zeroes gradient buffers. Pointers documented "may be NULL" mean
 *     that output is skipped.
 *   - long sums (layernorm statistics, softmax sums, bias gradients,
 *     sum_squares) are accumulated blockwise in float and/or in double so the
 *     results agree with a float64 reference to ~1e-6 relative.
 *   - deterministic: for a fixed thread count every kernel gives bitwise the
 *     same result on every run (no atomics, reductions in a fixed order).
 *
 * Threading: ALL parallelism is OpenMP inside these kernels; the BLAS is
 * always called single-threaded, from inside `omp parallel` regions, on a
 * slice of the product per thread (cpu_sgemm_par) or one attention head per
 * call. This avoids BLAS-thread / OpenMP-thread oversubscription on small
 * machines. It requires that the BLAS runs single-threaded there:
 *   - OpenBLAS (pthread build): handled here, openblas_set_num_threads(1) is
 *     called once on first use (compile-time detected via OPENBLAS_THREAD).
 *   - OpenBLAS (OpenMP build), oneDNN, BLIS-openmp: single-threaded inside a
 *     parallel region by themselves.
 *   - BLIS-pthread: do not set BLIS_NUM_THREADS.
 * Speed note: Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and
 * falls back to SSE3 kernels (5x slower); see cpu_blas_fast_path() below.
 */
/* Storage type of params, grads and activations. The fp32 program: float.
   The bf16 program (-DLLMC_BF16): bfloat16 bits in a struct, so that any
   arithmetic on floatX that forgets the conversion is a compile error.
   Kernels read with ldx() and write with stx(): fp32 arithmetic inside,
   one rounding (to nearest even, llmc/bf16.h) per stored value, as the
   CUDA kernels do. In the fp32 program both are the identity. */
#include "../bf16.h"
#ifndef FLOATX_DEFINED
#define FLOATX_DEFINED
#ifdef LLMC_BF16
typedef struct { uint16_t bits; } floatX;
#define FLOATX_BYTES 2
#else
typedef float floatX;
#define FLOATX_BYTES 4
#endif
#endif

#ifndef LLMC_CPU_COMMON_H
#define LLMC_CPU_COMMON_H

/* load and store of floatX (see above) */
#ifdef LLMC_BF16
static inline float ldx(floatX x) { return bf16_bits_to_float(x.bits); }
static inline floatX stx(float f) { floatX x; x.bits = bf16_bits_from_float(f); return x; }
#else
static inline float ldx(floatX x) { return x; }
static inline floatX stx(float f) { return f; }
#endif

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#include <malloc.h>
#endif

/* The bf16 program always uses oneDNN (its matmul primitive for the linear
   layers, llmc/cpu/matmul_bf16.h, and its sgemm for attention), with the headers
   of libdnnl-dev; the fp32 program only needs the runtime library. */
#if defined(LLMC_BF16) && !defined(LLMC_USE_DNNL)
#define LLMC_USE_DNNL
#endif
#if defined(LLMC_USE_DNNL) && defined(LLMC_BF16)
#if !__has_include(<oneapi/dnnl/dnnl.h>)
#error "the bf16 CPU program needs oneDNN's headers: apt-get install libdnnl-dev (or make deps)"
#endif
#include <oneapi/dnnl/dnnl.h>
#elif defined(LLMC_USE_DNNL)
/* oneDNN's row-major sgemm (dnnl.h); declared here so only the runtime
   library is needed: link with -l:libdnnl.so.2 */
#ifdef __cplusplus
extern "C"
#endif
int dnnl_sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K,
               float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc);
#else
#include <cblas.h>
#endif
/* the ISA level every kernel family follows (LLMC_CPU_ISA caps it) */
#include "isa.h"

/* ------------------------------------------------------------------------ */
/* threading helpers                                                        */

/* number of OpenMP threads a parallel region will get (1 without OpenMP) */
static inline int cpu_num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* [lo, hi) = the part of [0, n) that thread `ith` of `nth` owns; parts are
   contiguous, in thread order, and (except the last) multiples of `align` */
static inline void cpu_split_range(size_t n, int ith, int nth, size_t align,
                                   size_t* lo, size_t* hi) {
    size_t per = (n + (size_t)nth - 1) / (size_t)nth;
    per = (per + align - 1) / align * align;
    size_t a = per * (size_t)ith, b = a + per;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

/* Makes the BLAS single-threaded (see the top of the file). Idempotent and
   cheap after the first call; call it from serial code only. */
static inline void cpu_blas_init(void) {
#if !defined(LLMC_USE_DNNL) && !defined(LLMC_BLAS_THREADED) && defined(OPENBLAS_THREAD)
    static int done = 0;
    if (!done) {
        /* 1 = pthread build: its own pool would fight OpenMP's threads.
           2 = OpenMP build: single-threaded inside parallel regions already
           (and set_num_threads would shrink OpenMP's pool). */
        if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
        done = 1;
    }
#endif
}

#include <unistd.h>
#ifdef __cplusplus
extern "C" {
#endif
extern char** environ;
#ifdef __cplusplus
}
#endif
/* Transparent huge pages for the blocks glibc maps, opt-in with
   LLMC_MALLOC_HUGETLB=1: once, before anything else, re-executes the
   program with glibc.malloc.hugetlb=1 added to GLIBC_TUNABLES (glibc >=
   2.35: malloc madvises what it maps MADV_HUGEPAGE, and grows its heap in
   2 MB steps), when the kernel gives huge pages only to such regions
   (/sys/kernel/mm/transparent_hugepage/enabled is "[madvise]"; with
   "always" they have them already, with "never" it changes nothing).
   Why: oneDNN's sgemm allocates its packing buffers on every call and the
   128 KiB mmap threshold (backend_preinit, cpu/backend.h) maps each
   afresh: at d6 B=4 T=256 the fp32 step took about 32,000 page faults (14
   blocks of 6 MB, 12 of 1.2 MB, 160 of 150-200 KB) and 890-930 ms against
   its kernels' 615-695; with 2 MB pages 660-690 ms (AMD EPYC Zen 5, 2
   threads). Why not by default: the heap's 2 MB steps make the baseline a
   run measures up to 2 MB larger than the one --estimate measured (0.5959
   against 0.594 GB at the edge of a 600 MB cgroup: fit_details.sh's
   "named model" then refused), so the two predictions of one
   configuration disagree. Keeping the freed blocks in the heap instead (a
   32 MiB threshold) was faster still (615 ms) but the heap then grew with
   fragmentation past the prediction (used / predicted up to 1.066 in the
   bf16 program's fp32-copy path at T=1024). Never under AddressSanitizer
   (its own allocator), nor when GLIBC_TUNABLES already names the tunable. */
static inline void cpu_malloc_hugepages(char** argv) {
#if !defined(__SANITIZE_ADDRESS__)
    const char* t = getenv("GLIBC_TUNABLES");
    const char* on = getenv("LLMC_MALLOC_HUGETLB");
    if ((t && strstr(t, "glibc.malloc.hugetlb")) || !on || strcmp(on, "1") != 0) return;
    FILE* f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    if (!f) return;
    if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
    fclose(f);
    if (!strstr(mode, "[madvise]")) return;
    size_t n = 0;
    while (environ && environ[n]) n++;
    char** env = (char**)malloc((n + 2) * sizeof(char*));
    static char var[4096];
    if (!env || snprintf(var, sizeof var, "GLIBC_TUNABLES=%s%sglibc.malloc.hugetlb=1", t ? t : "", t && t[0] ? ":" : "") >= (int)sizeof var) {
        free(env);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "GLIBC_TUNABLES=", 15) != 0) env[k++] = environ[i];
    env[k++] = var;
    env[k] = NULL;
    fflush(NULL);
    execve("/proc/self/exe", argv, env);
    free(env);   /* exec failed: carry on with 4 KiB pages */
#else
    (void)argv;
#endif
}


/* OpenBLAS fast path. Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not
   recognise recent Xeons (e.g. Sapphire/Emerald Rapids) and picks its SSE3
   "Prescott" kernels: ~30 instead of ~150 GFLOP/s per core. It reads
   OPENBLAS_CORETYPE only while the library loads, so the fix has to be made
   before the program starts: if OPENBLAS_CORETYPE is unset and OpenBLAS chose
   a core below what the CPU supports, this sets OPENBLAS_CORETYPE=SkylakeX
   (the ISA level, isa.h, is avx512 or above) or Haswell (avx2, or an
   AVX-512 CPU capped at avx2 by LLMC_CPU_ISA) and re-executes the program
   (/proc/self/exe, same argv, same pid; an explicit OPENBLAS_CORETYPE is
   always respected, so it cannot loop). Call it first thing in main(),
   before MPI_Init and before any thread is created. Returns normally when
   nothing needs doing or re-execution failed (then it is just slower). A
   no-op unless linked against OpenBLAS on Linux/x86-64. */
#if !defined(LLMC_USE_DNNL) && defined(OPENBLAS_THREAD) && defined(__linux__) && \
    defined(__x86_64__) && defined(__GNUC__)
#include <stdio.h>
#include <unistd.h>
#ifdef __cplusplus
extern "C" {
#endif
extern char** environ;
#ifdef __cplusplus
}
#endif
static inline void cpu_blas_fast_path(char** argv) {
    if (getenv("OPENBLAS_CORETYPE") != NULL) return;
    const char* core = openblas_get_corename();
    const char* want = NULL;
    CpuIsa level = cpu_isa();
    if (level < CPU_ISA_AVX512 && cpu_isa_state.detected >= CPU_ISA_AVX512) {
        /* LLMC_CPU_ISA caps an AVX-512 CPU at avx2: OpenBLAS's AVX2 kernels */
        if (strstr(core, "aswell") == NULL && strstr(core, "Zen") == NULL) want = "Haswell";
    } else if (level >= CPU_ISA_AVX512) {
        if (strstr(core, "kylakex") == NULL && strstr(core, "ooperlake") == NULL &&
            strstr(core, "apphire") == NULL)
            want = "SkylakeX";
    } else if (level >= CPU_ISA_AVX2) {
        if (strstr(core, "aswell") == NULL && strstr(core, "kylake") == NULL &&
            strstr(core, "Zen") == NULL && strstr(core, "ooperlake") == NULL &&
            strstr(core, "apphire") == NULL)
            want = "Haswell";
    }
    if (!want) return;
    size_t n = 0;
    while (environ && environ[n]) n++;
    char** env = (char**)malloc((n + 2) * sizeof(char*));
    if (!env) return;
    static char var[64];
    snprintf(var, sizeof var, "OPENBLAS_CORETYPE=%s", want);
    for (size_t i = 0; i < n; i++) env[i] = environ[i];
    env[n] = var;
    env[n + 1] = NULL;
    fflush(NULL);
    execve("/proc/self/exe", argv, env);
    free(env); /* exec failed: carry on with the slow kernels */
}
#else
static inline void cpu_blas_fast_path(char** argv) { (void)argv; }
#endif

/* C(M,N) = alpha * op(A) op(B) + beta * C, row-major, op = transpose if
   ta/tb is non-zero. op(A) is (M,K) with leading dimension lda (A stored
   (M,K) if !ta, (K,M) if ta); likewise B. Single call into the BLAS, run on
   the calling thread. */
static inline void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha,
                             const float* A, int lda, const float* B, int ldb,
                             float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef LLMC_USE_DNNL
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
               beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb,
                beta, C, ldc);
#endif
}

/* Products below this many multiply-adds are not split among threads. */
#ifndef CPU_GEMM_SPLIT_MIN
#define CPU_GEMM_SPLIT_MIN 2e6
#endif

/* Thread ith's share (of nth) of the product of cpu_sgemm: the larger of the
   two output dimensions (M or N) is cut into contiguous slices (multiples of
   64), one per thread, and the slice is one single-threaded BLAS call.
   Products smaller than CPU_GEMM_SPLIT_MIN are done whole by thread 0. If
   bias is not NULL, the slice of C is first set to the broadcast row bias
   (N) and beta must be 1 (for matmul_forward). Call it from every thread of
   a parallel region (or with ith=0, nth=1); slices are disjoint, so no
   barrier is needed between consecutive calls on different outputs. */
static inline void cpu_sgemm_part(int ith, int nth, int ta, int tb, int M,
                                  int N, int K, float alpha, const float* A,
                                  int lda, const float* B, int ldb, float beta,
                                  float* C, int ldc, const float* bias) {
    size_t lo = 0, hi = 0;
    int split_m = M >= N;
    if ((double)M * N * K < CPU_GEMM_SPLIT_MIN || nth <= 1) {
        if (ith == 0) hi = (size_t)(split_m ? M : N);
    } else {
        cpu_split_range((size_t)(split_m ? M : N), ith, nth, 64, &lo, &hi);
    }
    if (hi <= lo) return;
    int n = (int)(hi - lo), o = (int)lo;
    if (split_m) {
        /* rows o..o+n of C need rows o.. of op(A) */
        float* Cp = C + (size_t)o * ldc;
        if (bias)
            for (int i = 0; i < n; i++) memcpy(Cp + (size_t)i * ldc, bias, sizeof(float) * N);
        const float* Ap = ta ? A + o : A + (size_t)o * lda;
        cpu_sgemm(ta, tb, n, N, K, alpha, Ap, lda, B, ldb, beta, Cp, ldc);
    } else {
        /* columns o..o+n of C need columns o.. of op(B) */
        if (bias)
            for (int i = 0; i < M; i++)
                memcpy(C + (size_t)i * ldc + o, bias + o, sizeof(float) * n);
        const float* Bp = tb ? B + (size_t)o * ldb : B + o;
        cpu_sgemm(ta, tb, M, n, K, alpha, A, lda, Bp, ldb, beta, C + o, ldc);
    }
}

/* index of this thread and size of the current team (0, 1 outside OpenMP) */
static inline void cpu_thread_id(int* ith, int* nth) {
#ifdef _OPENMP
    *ith = omp_get_thread_num();
    *nth = omp_get_num_threads();
#else
    *ith = 0;
    *nth = 1;
#endif
}

/* Same product as cpu_sgemm, computed by all OpenMP threads, each doing its
   slice (cpu_sgemm_part) with a single-threaded BLAS call. With
   -DLLMC_BLAS_THREADED it is instead one call from serial code, threaded by
   the BLAS itself (for comparison only; the attention kernels still call
   the BLAS from inside parallel regions). */
static inline void cpu_sgemm_par(int ta, int tb, int M, int N, int K,
                                 float alpha, const float* A, int lda,
                                 const float* B, int ldb, float beta, float* C,
                                 int ldc) {
    cpu_blas_init();
#ifdef LLMC_BLAS_THREADED
    cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    if ((double)M * N * K < CPU_GEMM_SPLIT_MIN || cpu_num_threads() <= 1) {
        cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        cpu_sgemm_part(ith, nth, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
                       ldc, NULL);
    }
#endif
}

/* out[j] = round(out[j] + sum over the N rows, in row order, of
   rows[n*ld + j]) for j < w: the ordered column sums of the bias gradients
   (matmul's dbias, layernorm's dbias), accumulated in double so the result
   agrees with a float64 reference, one rounding per element. Runs on the
   calling thread (callers split the columns among threads); out and rows
   point at the thread's first column. */
static inline void cpu_column_sum_add(floatX* out, const floatX* rows, int N, size_t ld, size_t w) {
    double* acc = (double*)calloc(w, sizeof(double));
    if (!acc) { fprintf(stderr, "error: out of memory: %zu bytes of column sums\n", w * sizeof(double)); exit(1); }
    for (int n = 0; n < N; n++) {
        const floatX* d = rows + (size_t)n * ld;
#pragma omp simd
        for (size_t j = 0; j < w; j++) acc[j] += ldx(d[j]);
    }
    for (size_t j = 0; j < w; j++) out[j] = stx(ldx(out[j]) + (float)acc[j]);
    free(acc);
}

/* ------------------------------------------------------------------------ */
/* vectorizable elementary functions (plain arithmetic, so that gcc
   vectorizes loops calling them without libmvec or -ffast-math)            */

/* exp(x) for finite float x: n = round(x/ln2), r = x - n*ln2 (two-constant
   Cody-Waite reduction, |r| <= ln2/2), exp(r) by its degree-6 Taylor
   polynomial, times 2^n built in the exponent bits. Relative error < 3e-7
   for x in [-87, 88]; returns 0 below about -87.3 (where exp < 2^-126) and
   stays finite (~2^128) above 88.7. Written without float comparisons: gcc
   (without -ffast-math) does not if-convert float clamps here, which would
   keep every loop that calls this function from vectorizing. */
static inline float cpu_expf(float x) {
    float z = x * 1.44269504088896341f;
    int32_t ni = (int32_t)(z + copysignf(0.5f, z));
    float n = (float)ni;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t nc = ni > 127 ? 127 : ni;
    int32_t bits = (nc + 127) << 23;
    bits = ni < -126 ? 0 : bits;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

/* tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|); absolute error
   < 3e-7 */
static inline float cpu_tanhf(float u) {
    float e = cpu_expf(-2.0f * fabsf(u));
    return copysignf((1.0f - e) / (1.0f + e), u);
}


/* cpu_thread_scratch(n): n floats of scratch owned by the calling thread
   (OpenMP keeps its threads, so each keeps its buffer), grown when a call
   needs more and never freed: kernels that run on every step need no
   allocation per call (a per-call malloc of a large buffer is an mmap and
   page faults each time). Contents are undefined (callers write before
   they read). One user at a time per thread: a kernel must not call
   another kernel that uses it while it holds the buffer. Out of memory:
   one "error:" line, exit 1. */
static inline float* cpu_thread_scratch(size_t n) {
    static _Thread_local float* buf = NULL;
    static _Thread_local size_t cap = 0;
    if (n > cap) {
        free(buf);
        buf = (float*)malloc(sizeof(float) * n);
        if (!buf) { fprintf(stderr, "error: out of memory: %zu bytes of kernel scratch\n", sizeof(float) * n); exit(1); }
        cap = n;
    }
    return buf;
}

/* ------------------------------------------------------------------------ */
/* layout-invariant mode (--invariant 1, docs/design.md section 13)         */
/* cpu_inv_T: 0 = off; else the rows per sequence (T) of the kernels' row
   dimension (N = B*T). Set once at start-up (backend_set_invariant). Then:
   - every product (matmul forward, dinp) runs on fixed tiles of
     cpu_inv_rows(T) rows x cpu_inv_cols(OC) columns (the fp32 program;
     the bf16 program's: CPU_INV_COLS), one single-threaded BLAS call per
     tile, so a row's bits depend neither on B nor on the thread
     count;
   - every sum over rows (dweight, dbias, LayerNorm's dweight and dbias) is
     one sum per sequence (its T rows in order), then a pairwise tree over
     the B sequences (cpu_tree_push), B a power of two: the rank's part is
     a subtree of the global batch's tree. */
static int cpu_inv_T = 0;
/* the tree's rounding at every node (and of every leaf): to the storage
   type, so that the bf16 program's tree is the same whichever rank or
   micro-step forms a node (a rank's subtree is stored and sent as bf16);
   the identity in the fp32 program */
static inline float cpu_inv_round(float x) { return ldx(stx(x)); }
/* --invariant 1's malloc policy (setup_invariant, once, before the first
   step): the fixed tiles call the sgemm once per tile, and oneDNN's sgemm
   mallocs its packing buffers on every call; above backend_preinit's fixed
   128 KiB mmap threshold each one was an mmap, page faults and an munmap
   with a TLB shootdown (d6 fp32, 2 threads, AMD EPYC Zen 4: 1176-1238 ms a
   step with the flag, 1034-1057 ms with these settings, 969-1050 ms
   without the flag). Blocks under 8 MiB then come from the heap, and up to
   16 MiB of free heap is kept rather than returned; MALLOC_MMAP_THRESHOLD_
   and MALLOC_TRIM_THRESHOLD_ in the environment take precedence. */
static inline void cpu_inv_malloc_policy(void) {
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 8 << 20);
    if (!getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, 16 << 20);
}
#define CPU_INV_COLS 256
/* the fp32 program's column tile of an invariant product with OC output
   columns: OC split into ceil(OC / 512) tiles of equal width, rounded up
   to 16 columns (GPT-2's C = 384: one tile of 384, not 256 + 128, which
   left a thin tile and one thread idle at its end: on a 2-core AMD EPYC
   Zen 3, 2 threads, d6's qkv, fc and LM-head dinp products at B*T = 1024
   took 1.30-1.35x one whole sgemm, now 0.87-1.01x). A function of OC alone, so the tiles
   are the same at every layout. */
static inline int cpu_inv_cols(int OC) {
    int nt = (OC + 511) / 512, cw = (OC + nt - 1) / nt;
    return (cw + 15) / 16 * 16;
}
/* the row tile: the largest power of two <= 64 that divides T (tiles never
   cross a sequence, so their shapes do not depend on B) */
static inline int cpu_inv_rows(int T) { int r = 64; while (r > 1 && T % r) r /= 2; return r; }

/* One leaf of a pairwise (binary-counter) sum of w floats: leaf (w floats)
   joins the pending subtrees of stack[0..]: while level l holds one, leaf =
   stack[l] + leaf (elementwise; fp32 addition is commutative, so only the
   pairing matters) and the level's buffer goes back to the free list
   (freel, *nfree). After 2^k leaves, stack[k] holds the sum of all, as the
   complete binary tree over them adds it. */
static inline void cpu_tree_push(float** stack, float** freel, int* nfree, float* leaf, size_t w) {
    int l = 0;
    while (stack[l]) {
        const float* a = stack[l];
#pragma omp simd
        for (size_t i = 0; i < w; i++) leaf[i] = cpu_inv_round(a[i] + leaf[i]);
        freel[(*nfree)++] = stack[l];
        stack[l] = NULL;
        l++;
    }
    stack[l] = leaf;
}
/* The root after the last leaf: the lowest-level pending sums folded
   upwards (for 2^k leaves there is exactly one, returned as is). */
static inline float* cpu_tree_root(float** stack, int levels, size_t w) {
    float* r = NULL;
    for (int l = 0; l < levels; l++) {
        if (!stack[l]) continue;
        if (!r) { r = stack[l]; continue; }
        for (size_t i = 0; i < w; i++) r[i] = cpu_inv_round(stack[l][i] + r[i]);
    }
    return r;
}

/* dst[j] (+)= the pairwise tree over the nseq sequences of T rows of the
   per-sequence column sums (in double over the sequence's rows in order,
   rounded to float once) of f(row), for the columns [lo, hi) of rows with
   leading dimension ld; one rounding more for dst[j] + tree. Runs on the
   calling thread. Used for the bias gradients (rows2 == NULL: f = dout)
   and LayerNorm's dweight (f = dout * (x - mean) * rstd). */
static inline void cpu_inv_column_sums(floatX* dst, const floatX* rows, const floatX* x, const float* mean, const float* rstd,
                                       int nseq, int T, size_t ld, size_t lo, size_t hi) {
    size_t w = hi - lo;
    int levels = 1;
    while ((1 << (levels - 1)) < nseq) levels++;
    size_t nf = ((size_t)(levels + 1) * w + 1) / 2 * 2;   /* the doubles start 8-byte aligned */
    float* sc = cpu_thread_scratch(nf + 2 * w);
    double* acc = (double*)(sc + nf);
    float* stack[40] = {0};
    float* freel[40];
    int nfree = 0;
    for (int l = 0; l <= levels; l++) freel[nfree++] = sc + (size_t)l * w;
    for (int s = 0; s < nseq; s++) {
        for (size_t j = 0; j < w; j++) acc[j] = 0.0;
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)s * T + t;
            const floatX* d = rows + n * ld + lo;
            if (x) {
                const floatX* xx = x + n * ld + lo;
                float m = mean[n], r = rstd[n];
#pragma omp simd
                for (size_t j = 0; j < w; j++) acc[j] += ldx(d[j]) * ((ldx(xx[j]) - m) * r);
            } else {
#pragma omp simd
                for (size_t j = 0; j < w; j++) acc[j] += ldx(d[j]);
            }
        }
        float* leaf = freel[--nfree];
        for (size_t j = 0; j < w; j++) leaf[j] = cpu_inv_round((float)acc[j]);
        cpu_tree_push(stack, freel, &nfree, leaf, w);
    }
    float* root = cpu_tree_root(stack, levels + 1, w);
    if (root)
        for (size_t j = 0; j < w; j++) dst[lo + j] = stx(ldx(dst[lo + j]) + root[j]);
}

/* dbias (OC) += the pairwise tree over sequences of their column sums
   (cpu_inv_column_sums), the columns split among threads. */
static inline void cpu_inv_dbias(floatX* dbias, const floatX* dout, int N, int OC) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)OC, ith, nth, 16, &lo, &hi);
        if (hi > lo) cpu_inv_column_sums(dbias, dout, NULL, NULL, NULL, N / cpu_inv_T, cpu_inv_T, (size_t)OC, lo, hi);
    }
}

#endif /* LLMC_CPU_COMMON_H */
