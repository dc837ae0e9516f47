/*
 * llmc/cpu/kernels.h -- the fp32 CPU kernels of the GPT-2 forward and backward
 * pass, plus the two optimizer-side kernels (sum of squares for the global
 * grad norm, AdamW). Header-only; OpenMP for threads, CBLAS (or oneDNN's
 * dnnl_sgemm with -DLLMC_USE_DNNL) for every matrix product.
 *
 * Conventions (all kernels):
 *   - row-major; N = B*T rows; floatX is float in this build.
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
#ifndef FLOATX_DEFINED
typedef float floatX;
#define FLOATX_DEFINED
#endif

#ifndef LLMC_CPU_KERNELS_H
#define LLMC_CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef LLMC_USE_DNNL
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

/* OpenBLAS fast path. Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not
   recognise recent Xeons (e.g. Sapphire/Emerald Rapids) and picks its SSE3
   "Prescott" kernels: ~30 instead of ~150 GFLOP/s per core. It reads
   OPENBLAS_CORETYPE only while the library loads, so the fix has to be made
   before the program starts: if OPENBLAS_CORETYPE is unset and OpenBLAS chose
   a core below what the CPU supports, this sets OPENBLAS_CORETYPE=SkylakeX
   (CPU has AVX-512F) or Haswell (AVX2+FMA) and re-executes the program
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
    if (__builtin_cpu_supports("avx512f")) {
        if (strstr(core, "kylakex") == NULL && strstr(core, "ooperlake") == NULL &&
            strstr(core, "apphire") == NULL)
            want = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
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

/* ------------------------------------------------------------------------ */
/* encoder                                                                  */

/* out (B,T,C) = wte (V,C) [inp (B,T)] + wpe (maxT,C) [t]: token embedding
   row plus position embedding row. Writes out (no accumulation). */
static inline void encoder_forward(floatX* out, const int* inp,
                                   const floatX* wte, const floatX* wpe, int B,
                                   int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        floatX* o = out + (size_t)bt * C;
        const floatX* we = wte + (size_t)inp[bt] * C;
        const floatX* pe = wpe + (size_t)t * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = we[i] + pe[i];
    }
}

/* dwte (V,C) [inp[b,t],:] += dout[b,t,:]; dwpe (maxT,C) [t,:] += sum_b
   dout[b,t,:]. Race-free with repeated token ids: the C channels are split
   among threads and each thread walks all B*T rows for its own channels
   (rows in order, so the result is deterministic). */
static inline void encoder_backward(floatX* dwte, floatX* dwpe,
                                    const floatX* dout, const int* inp, int B,
                                    int T, int C) {
#pragma omp parallel
    {
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        for (int bt = 0; bt < B * T && hi > lo; bt++) {
            int t = bt % T;
            const floatX* d = dout + (size_t)bt * C;
            floatX* we = dwte + (size_t)inp[bt] * C;
            floatX* pe = dwpe + (size_t)t * C;
#pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                we[i] += d[i];
                pe[i] += d[i];
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* layernorm                                                                */

/* For each of N rows x (C): mean = sum x / C, var = sum (x-mean)^2 / C
   (biased, two-pass), rstd = 1/sqrt(var + 1e-5),
   out = (x - mean) * rstd * weight + bias. mean, rstd (N) are saved for the
   backward. Sums in float over 16 lanes, then double. Writes out. */
static inline void layernorm_forward(floatX* out, float* mean, float* rstd,
                                     const floatX* inp, const floatX* weight,
                                     const floatX* bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const floatX* x = inp + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i < C; i++) s += x[i];
        float m = (float)((double)s / C);
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        float r = (float)(1.0 / sqrt((double)v / C + 1e-5));
        floatX* o = out + (size_t)n * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * r * weight[i] + bias[i];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

/* Backward of layernorm_forward. With xhat = (x - mean) * rstd and
   g = dout * weight (per row, C):
     dinp   += rstd * (g - mean(g) - xhat * mean(g * xhat))
     dweight += sum over rows of dout * xhat
     dbias   += sum over rows of dout
   dinp: rows split among threads. dweight/dbias: channels split among
   threads, each summing all N rows in order in double (deterministic).
   Shapes: dinp, dout, inp (N,C); dweight, dbias, weight (C); mean, rstd (N). */
static inline void layernorm_backward(floatX* dinp, floatX* dweight,
                                      floatX* dbias, const floatX* dout,
                                      const floatX* inp, const floatX* weight,
                                      const float* mean, const float* rstd,
                                      int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int n = 0; n < N; n++) {
            const floatX* x = inp + (size_t)n * C;
            const floatX* d = dout + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int i = 0; i < C; i++) {
                float g = d[i] * weight[i];
                sg += g;
                sgx += g * (x[i] - m) * r;
            }
            float mg = sg / C, mgx = sgx / C;
            floatX* di = dinp + (size_t)n * C;
#pragma omp simd
            for (int i = 0; i < C; i++) {
                float xh = (x[i] - m) * r;
                di[i] += r * (d[i] * weight[i] - mg - xh * mgx);
            }
        }
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        if (hi > lo) {
            size_t w = hi - lo;
            double* acc = (double*)calloc(2 * w, sizeof(double));
            double* aw = acc;
            double* ab = acc + w;
            for (int n = 0; n < N; n++) {
                const floatX* x = inp + (size_t)n * C + lo;
                const floatX* d = dout + (size_t)n * C + lo;
                float m = mean[n], r = rstd[n];
#pragma omp simd
                for (size_t i = 0; i < w; i++) {
                    ab[i] += d[i];
                    aw[i] += d[i] * ((x[i] - m) * r);
                }
            }
            for (size_t i = 0; i < w; i++) {
                dweight[lo + i] += (float)aw[i];
                dbias[lo + i] += (float)ab[i];
            }
            free(acc);
        }
    }
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
                for (size_t j = 0; j < w; j++) acc[j] += d[j];
            }
            for (size_t j = 0; j < w; j++) dbias[lo + j] += (float)acc[j];
            free(acc);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* attention                                                                */

/* Row-block size of the causal (lower-triangular) products: a block of
   CPU_ATT_BLOCK query rows only multiplies against the keys up to its last
   row, which skips most of the masked upper triangle. */
#ifndef CPU_ATT_BLOCK
#define CPU_ATT_BLOCK 64
#endif

/* Causal multi-head self-attention, one (b, h) per task, tasks split among
   threads, BLAS single-threaded per task. hs = C/NH, scale = 1/sqrt(hs).
   qkv (B,T,3C) = [q | k | v]; head h uses channels h*hs .. h*hs+hs-1 of each.
     preatt[b,h,t,s] = scale * q[b,t,h,:] . k[b,s,h,:]          (s <= t)
     att[b,h,t,s]    = exp(preatt - max) / sum_{s'<=t} exp(...)   (s <= t),
                       exactly 0 for s > t
     out[b,t,h*hs+i] = sum_{s<=t} att[b,h,t,s] v[b,s,h*hs+i]
   preatt, att: (B,NH,T,T); entries of preatt with s > t are left undefined.
   Writes out, preatt, att (no accumulation). */
static inline void attention_forward(floatX* out, floatX* preatt, floatX* att,
                                     const floatX* qkv, int B, int T, int C,
                                     int NH) {
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
        const floatX* k = q + C;
        const floatX* v = q + 2 * C;
        floatX* pre = preatt + (size_t)bh * T * T;
        floatX* a = att + (size_t)bh * T * T;
        floatX* o = out + (size_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* pre[r0:r1, 0:r1] = scale * q[r0:r1] k[0:r1]^T */
            cpu_sgemm(0, 1, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3, k,
                      C3, 0.0f, pre + (size_t)r0 * T, T);
        }
        for (int t = 0; t < T; t++) {
            const floatX* p = pre + (size_t)t * T;
            floatX* ar = a + (size_t)t * T;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int s = 0; s <= t; s++) mx = p[s] > mx ? p[s] : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int s = 0; s <= t; s++) {
                float e = cpu_expf(p[s] - mx);
                ar[s] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int s = 0; s <= t; s++) ar[s] *= inv;
            for (int s = t + 1; s < T; s++) ar[s] = 0.0f;
        }
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* out[r0:r1] = att[r0:r1, 0:r1] v[0:r1] (att is 0 past t) */
            cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, a + (size_t)r0 * T, T, v, C3,
                      0.0f, o + (size_t)r0 * C, C);
        }
    }
}

/* Backward of attention_forward; accumulates into dqkv (B,T,3C):
     datt[t,s]    = dout[t,h,:] . v[s,h,:]                          (s <= t)
     dpreatt[t,s] = scale * att[t,s] (datt[t,s] - sum_s' att[t,s'] datt[t,s'])
     dq += dpreatt @ k ;  dk += dpreatt^T @ q ;  dv += att^T @ dout_h
   (the 1/sqrt(hs) scale is folded into dpreatt). dpreatt and datt
   (B,NH,T,T) are scratch that this kernel overwrites, their prior contents
   are never read: on return datt holds dL/datt for s <= t (other entries
   undefined) and dpreatt holds scale-included dL/dpreatt for s <= t and
   exactly 0 for s > t. dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) as in the
   forward. Each (b,h) writes a disjoint set of dqkv columns: race-free. */
static inline void attention_backward(floatX* dqkv, floatX* dpreatt,
                                      floatX* datt, const floatX* dout,
                                      const floatX* qkv, const floatX* att,
                                      int B, int T, int C, int NH) {
    cpu_blas_init();
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const floatX* q = qkv + (size_t)b * T * C3 + h * hs;
        const floatX* k = q + C;
        const floatX* v = q + 2 * C;
        floatX* dq = dqkv + (size_t)b * T * C3 + h * hs;
        floatX* dk = dq + C;
        floatX* dv = dq + 2 * C;
        const floatX* a = att + (size_t)bh * T * T;
        floatX* dp = dpreatt + (size_t)bh * T * T;
        floatX* da = datt + (size_t)bh * T * T;
        const floatX* d = dout + (size_t)b * T * C + h * hs;
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* datt[r0:r1, 0:r1] = dout_h[r0:r1] v[0:r1]^T */
            cpu_sgemm(0, 1, r1 - r0, r1, hs, 1.0f, d + (size_t)r0 * C, C, v, C3,
                      0.0f, da + (size_t)r0 * T, T);
        }
        for (int t = 0; t < T; t++) {
            const floatX* ar = a + (size_t)t * T;
            const floatX* dar = da + (size_t)t * T;
            floatX* dpr = dp + (size_t)t * T;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int s = 0; s <= t; s++) dot += ar[s] * dar[s];
#pragma omp simd
            for (int s = 0; s <= t; s++) dpr[s] = scale * ar[s] * (dar[s] - dot);
            for (int s = t + 1; s < T; s++) dpr[s] = 0.0f;
        }
        for (int r0 = 0; r0 < T; r0 += CPU_ATT_BLOCK) {
            int r1 = r0 + CPU_ATT_BLOCK < T ? r0 + CPU_ATT_BLOCK : T;
            /* dq[r0:r1] += dpreatt[r0:r1, 0:r1] k[0:r1] */
            cpu_sgemm(0, 0, r1 - r0, hs, r1, 1.0f, dp + (size_t)r0 * T, T, k, C3,
                      1.0f, dq + (size_t)r0 * C3, C3);
            /* keys/values s in [r0,r1) get contributions from queries t >= r0:
               dk[r0:r1] += dpreatt[r0:T, r0:r1]^T q[r0:T]
               dv[r0:r1] += att[r0:T, r0:r1]^T dout_h[r0:T] */
            cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f,
                      dp + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3, 1.0f,
                      dk + (size_t)r0 * C3, C3);
            cpu_sgemm(1, 0, r1 - r0, hs, T - r0, 1.0f,
                      a + (size_t)r0 * T + r0, T, d + (size_t)r0 * C, C, 1.0f,
                      dv + (size_t)r0 * C3, C3);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* GELU, residual                                                           */

#define CPU_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp.
   Writes out. */
static inline void gelu_forward(floatX* out, const floatX* inp, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + cpu_tanhf(u));
    }
}

/* dinp (N) += gelu'(x) * dout, with u as in the forward and
   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)
              (1 + 3 * 0.044715 x^2). */
static inline void gelu_backward(floatX* dinp, const floatX* inp,
                                 const floatX* dout, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = CPU_GELU_K * (x + 0.044715f * x * x * x);
        float th = cpu_tanhf(u);
        float g = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * CPU_GELU_K *
                      (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += g * dout[i];
    }
}

/* out (N) = inp1 + inp2 (out may alias an input). Writes out. */
static inline void residual_forward(floatX* out, const floatX* inp1,
                                    const floatX* inp2, int N) {
#pragma omp parallel for simd schedule(static)
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

/* ------------------------------------------------------------------------ */
/* classifier: softmax + cross-entropy (+ its gradient), fused              */

/* logits (N,Vp) row-major, columns V..Vp-1 are padding. Per row n:
     losses[n] = log(sum_{j<V} exp(l_j - max)) - (l_target - max)
               = -log softmax(l[0:V])[target]          (targets[n] in [0,V))
   If dloss != 0 the row is overwritten with
     dlogits[j] = dloss * (softmax_j - [j == target])  for j < V, 0 for j >= V
   (dloss is dL/dlosses[n], e.g. 1/(B*T) for a mean loss). The exponentials
   are computed once: stored into the row in the first pass, rescaled in the
   second. Sums: 512-element float blocks added into a double. */
static inline void fused_classifier(floatX* logits, float* losses,
                                    const int* targets, int N, int V, int Vp,
                                    float dloss) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        floatX* l = logits + (size_t)n * Vp;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        int tgt = targets[n];
        float lt = l[tgt];
        double sum = 0.0;
        for (int j0 = 0; j0 < V; j0 += 512) {
            int j1 = j0 + 512 < V ? j0 + 512 : V;
            float s = 0.0f;
            if (dloss != 0.0f) {
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) {
                    float e = cpu_expf(l[j] - mx);
                    l[j] = e;
                    s += e;
                }
            } else {
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) s += cpu_expf(l[j] - mx);
            }
            sum += s;
        }
        if (losses) losses[n] = (float)(log(sum) - ((double)lt - (double)mx));
        if (dloss != 0.0f) {
            float f = (float)((double)dloss / sum);
#pragma omp simd
            for (int j = 0; j < V; j++) l[j] *= f;
            l[tgt] -= dloss;
            for (int j = V; j < Vp; j++) l[j] = 0.0f;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* optimizer-side kernels                                                   */

/* sum_i x[i]^2 over n elements (any shard), squares and sums in double
   (vector lanes, then per-thread partials combined in thread order). */
static inline double sum_squares(const floatX* x, size_t n) {
    int nth = cpu_num_threads();
    double part[256];
    if (nth > 256) nth = 256;
    for (int i = 0; i < nth; i++) part[i] = 0.0;
#pragma omp parallel num_threads(nth)
    {
        int ith, nt;
        cpu_thread_id(&ith, &nt);
        size_t lo, hi;
        cpu_split_range(n, ith, nt, 1024, &lo, &hi);
        double acc = 0.0;
#pragma omp simd reduction(+ : acc)
        for (size_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];
        part[ith] = acc;
    }
    double s = 0.0;
    for (int i = 0; i < nth; i++) s += part[i];
    return s;
}

/* AdamW on n elements (any shard), in torch.optim.AdamW's order:
     g = grads[i] * grad_scale
     m = m + (1-beta1) (g - m)            (= beta1 m + (1-beta1) g)
     v = beta2 v + (1-beta2) g^2
     w = (master ? master[i] : params[i])
     w = w (1 - lr weight_decay) - (lr/beta1_correction) m /
         (sqrt(v)/sqrt(beta2_correction) + eps)
   which equals w - lr (mhat/(sqrt(vhat)+eps) + weight_decay w) with
   mhat = m/beta1_correction, vhat = v/beta2_correction,
   beta{1,2}_correction = 1 - beta{1,2}^step. Stores w to master (if not
   NULL) and params; m, v (n) updated in place. */
static inline void adamw_update(floatX* params, float* master,
                                const floatX* grads, float* m, float* v,
                                size_t n, float lr, float beta1, float beta2,
                                float beta1_correction, float beta2_correction,
                                float eps, float weight_decay,
                                float grad_scale) {
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr / beta1_correction;
    const float bc2_sqrt = sqrtf(beta2_correction);
    const float om1 = 1.0f - beta1, om2 = 1.0f - beta2;
    if (master) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float g = grads[i] * grad_scale;
            float mi = m[i] + om1 * (g - m[i]);
            float vi = beta2 * v[i] + om2 * (g * g);
            m[i] = mi;
            v[i] = vi;
            float w = master[i] * decay - step * (mi / (sqrtf(vi) / bc2_sqrt + eps));
            master[i] = w;
            params[i] = w;
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            float g = grads[i] * grad_scale;
            float mi = m[i] + om1 * (g - m[i]);
            float vi = beta2 * v[i] + om2 * (g * g);
            m[i] = mi;
            v[i] = vi;
            params[i] = params[i] * decay - step * (mi / (sqrtf(vi) / bc2_sqrt + eps));
        }
    }
}

#endif /* LLMC_CPU_KERNELS_H */
