/*
 * dev/bench_kernels.c -- speed of the CPU kernels (llmc/cpu/kernels.h), in
 * the precision it is built for (fp32; or bf16 with -DLLMC_BF16 ... -ldnnl):
 *   0. the machine's peaks: the register-loop rate of every ISA level this
 *      CPU runs (llmc/cpu/isa.h: AVX2 FMA, AVX-512 FMA, AVX512-BF16
 *      vdpbf16ps, AMX-BF16 tiles; LLMC_CPU_ISA caps it), the peak of the
 *      implementation this build's matmuls use, and in the bf16 build the
 *      best of oneDNN's bf16 matmul primitive on large products;
 *   1. matmul GFLOP/s for every matrix shape of GPT-2's forward and backward
 *      (d6: C=384; 124M: C=768) as the kernels call them (fp32:
 *      cpu_sgemm_par; bf16: cpu_gemm_bf16, oneDNN's matmul primitive), best
 *      of several runs;
 *   2. a whole GPT-2 training step built from the kernels alone (forward,
 *      fused classifier, backward, grad norm, AdamW; bf16: fp32 master
 *      weights) on random tokens, timed per kernel group; prints tokens/s,
 *      achieved GFLOP/s (model FLOPs: 6 * params_in_matmuls + attention, per
 *      token) and the loss of each step (it must fall: the batch is
 *      repeated).
 *   3. stream: the memory bandwidth of a STREAM-style triad (the bound of
 *      the optimizer, which streams p, g, m, v once per step);
 * usage: bench_kernels [peak] [stream] [gemm] [elem] [step L NH C B T [steps]]  (default: all)
 *   elem: the non-matmul kernels one at a time at d6 sizes
 *   peak prints "peak fp32 X" / "peak bf16 Y" lines (GFLOP/s) for dev/bench.sh
 *   BENCH_CPUTIME=1: time with the process CPU clock (see now_s)
 *
 * builds (the BLAS is whichever the command line links):
 *  OpenBLAS (Debian default, pthread):
 *    gcc -O3 -mavx2 -mfma -fopenmp -std=c11 -I. dev/bench_kernels.c -lopenblas -lm
 *    main() calls cpu_blas_fast_path(), which sets OPENBLAS_CORETYPE=SkylakeX
 *    and re-executes if OpenBLAS did not recognise the CPU; run with
 *    OPENBLAS_CORETYPE=Prescott to see the slow default
 *  OpenBLAS OpenMP build: -I/usr/include/x86_64-linux-gnu/openblas-openmp
 *    -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas
 *  BLIS: -D_GNU_SOURCE -I/usr/include/x86_64-linux-gnu/blis-openmp
 *    -L/usr/lib/x86_64-linux-gnu/blis-openmp -lblis   (BLIS_ARCH_TYPE=skx)
 *  oneDNN: -DLLMC_USE_DNNL ... -l:libdnnl.so.2  (no environment needed)
 *  add -DLLMC_BLAS_THREADED to let the BLAS thread the big products itself.
 *
 * measured (2-core Xeon model 207, AVX-512, FMA-loop peak ~340 GFLOP/s,
 * -O3 -mavx2 -mfma, idle machine; tokens/s of a whole step, d6 = L6 C384
 * B4 T256 / 124M = L12 C768 B4 T64):
 *   oneDNN 2.6 (split)                        1270 / 253   (~69% of peak)
 *   OpenBLAS 0.3.21 pthread, SkylakeX (split) 1200-1230 / 240
 *   OpenBLAS 0.3.21 openmp, SkylakeX          1190-1224 / 238-244
 *   BLIS 0.9 openmp, BLIS_ARCH_TYPE=skx       1120-1140 / 214-218
 *   OpenBLAS 0.3.21 default (Prescott)        322 (d6)
 *   sgemm, 2 threads: 280-345 GFLOP/s for every shape (oneDNN, OpenBLAS
 *   SkylakeX); ~30/core for OpenBLAS Prescott, ~160 on 2 cores BLIS haswell.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <malloc.h>

#include "llmc/cpu/kernels.h"

/* wall clock; with BENCH_CPUTIME=1 the process CPU time instead (for
   comparisons on a shared machine with OMP_NUM_THREADS=1: other processes
   then barely change the figures; with more threads, idle threads spinning
   at barriers count too) */
static double now_s(void) {
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("BENCH_CPUTIME") && getenv("BENCH_CPUTIME")[0] == '1';
    struct timespec t;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
static float* falloc(size_t n) {
    float* p = (float*)malloc(n * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory (%zu floats)\n", n); exit(1); }
    return p;
}
static floatX* xalloc(size_t n) {
    floatX* p = (floatX*)aligned_alloc(64, (n * sizeof(floatX) + 63) / 64 * 64);
    if (!p) { fprintf(stderr, "out of memory (%zu elements)\n", n); exit(1); }
    return p;
}
static unsigned long long rs = 88172645463325252ULL;
static float frnd(void) { /* uniform [-1,1) */
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(floatX* p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = stx(scale * frnd());
}
#ifdef LLMC_BF16
#define PRECISION "bf16"
#else
#define PRECISION "fp32"
#endif

/* ---- 0. the machine's peaks ------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 12 independent chains of AVX2 FMAs in registers (8 lanes x 2 flops = 16
   flops per instruction; 12 chains cover the FMA latency x 2 ports of
   current x86 cores): returns GFLOP/s of this thread */
__attribute__((target("avx2,fma"))) static double fma_peak_avx2(long iters) {
    __m256 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps(0.1f * i);
    const __m256 a = _mm256_set1_ps(0.9999999f), b = _mm256_set1_ps(1e-7f);
    double t0 = now_s();
    for (long it = 0; it < iters; it++) {
#define FMA8(x) x = _mm256_fmadd_ps(x, a, b)
        FMA8(c[0]); FMA8(c[1]); FMA8(c[2]); FMA8(c[3]); FMA8(c[4]); FMA8(c[5]);
        FMA8(c[6]); FMA8(c[7]); FMA8(c[8]); FMA8(c[9]); FMA8(c[10]); FMA8(c[11]);
#undef FMA8
    }
    double dt = now_s() - t0;
    __m256 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, c[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    volatile float sink = lanes[0] + lanes[7]; /* keeps the chains alive */
    (void)sink;
    return 12.0 * 16.0 * iters / dt * 1e-9;
}
/* 16 independent chains of AVX-512 FMAs in registers (16 lanes x 2 flops =
   32 flops per instruction): returns GFLOP/s of this thread */
__attribute__((target("avx512f"))) static double fma_peak_avx512(long iters) {
    __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.2f),
           c3 = _mm512_set1_ps(0.3f), c4 = _mm512_set1_ps(0.4f), c5 = _mm512_set1_ps(0.5f),
           c6 = _mm512_set1_ps(0.6f), c7 = _mm512_set1_ps(0.7f), c8 = _mm512_set1_ps(0.8f),
           c9 = _mm512_set1_ps(0.9f), c10 = _mm512_set1_ps(1.0f), c11 = _mm512_set1_ps(1.1f),
           c12 = _mm512_set1_ps(1.2f), c13 = _mm512_set1_ps(1.3f), c14 = _mm512_set1_ps(1.4f),
           c15 = _mm512_set1_ps(1.5f);
    const __m512 a = _mm512_set1_ps(0.9999999f), b = _mm512_set1_ps(1e-7f);
    double t0 = now_s();
    for (long it = 0; it < iters; it++) {
#define FMA16(x) x = _mm512_fmadd_ps(x, a, b)
        FMA16(c0); FMA16(c1); FMA16(c2); FMA16(c3); FMA16(c4); FMA16(c5); FMA16(c6);
        FMA16(c7); FMA16(c8); FMA16(c9); FMA16(c10); FMA16(c11); FMA16(c12); FMA16(c13);
        FMA16(c14); FMA16(c15);
#undef FMA16
    }
    double dt = now_s() - t0;
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                                       _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15))));
    float lanes[16];
    _mm512_storeu_ps(lanes, s);
    volatile float sink = lanes[0] + lanes[15]; /* keeps the chains alive */
    (void)sink;
    return 16.0 * 32.0 * iters / dt * 1e-9;
}
/* the same with AVX512-BF16 dot products: vdpbf16ps adds 16 lanes x 2 bf16
   products (64 flops per instruction) into fp32 accumulators */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_peak(long iters) {
    __m512 c[16];
    for (int i = 0; i < 16; i++) c[i] = _mm512_set1_ps(0.1f * i);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    double t0 = now_s();
    for (long it = 0; it < iters; it++) {
#define DP16(x) x = _mm512_dpbf16_ps(x, a, b)
        DP16(c[0]); DP16(c[1]); DP16(c[2]); DP16(c[3]); DP16(c[4]); DP16(c[5]); DP16(c[6]);
        DP16(c[7]); DP16(c[8]); DP16(c[9]); DP16(c[10]); DP16(c[11]); DP16(c[12]); DP16(c[13]);
        DP16(c[14]); DP16(c[15]);
#undef DP16
    }
    double dt = now_s() - t0;
    __m512 s = c[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, c[i]);
    float lanes[16];
    _mm512_storeu_ps(lanes, s);
    volatile float sink = lanes[0] + lanes[15];
    (void)sink;
    return 16.0 * 64.0 * iters / dt * 1e-9;
}
/* AMX-BF16: four independent tile products (tdpbf16ps: C (16x16 fp32) +=
   A (16x32 bf16) B (32x16 bf16 in pairs) = 16*16*32*2 = 16384 flops each)
   on tiles loaded once, as oneDNN's brgemm kernels issue them. Needs the
   OS permission that cpu_isa_init asks for (isa.h). GFLOP/s of this thread. */
typedef struct { unsigned char palette, start; unsigned char res[14]; unsigned short colsb[16]; unsigned char rows[16]; } AmxTileConfig;
__attribute__((target("amx-tile,amx-bf16"))) static double amx_peak_thread(long iters) {
    AmxTileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    _tile_loadconfig(&cfg);
    static _Thread_local unsigned short buf[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++) buf[i] = 0x3f80;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64); _tile_loadd(7, buf, 64);
    double t0 = now_s();
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    double dt = now_s() - t0;
    static _Thread_local float out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    volatile float sink = out[0];
    (void)sink;
    return 4.0 * 16384.0 * iters / dt * 1e-9;
}
#endif

/* The register-loop peak (GFLOP/s, all OpenMP threads together, best of 5)
   of the instructions of ISA level `l` (isa.h): AVX2 FMA, AVX-512 FMA,
   AVX512-BF16 vdpbf16ps, AMX-BF16 tiles; 0 if the CPU (or LLMC_CPU_ISA)
   does not allow the level. */
static double isa_peak(CpuIsa l) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cpu_isa() < l) return 0.0;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double tot = 0;
#pragma omp parallel reduction(+ : tot)
        tot += l == CPU_ISA_AVX2 ? fma_peak_avx2(6000000) : l == CPU_ISA_AVX512 ? fma_peak_avx512(6000000)
             : l == CPU_ISA_AVX512_BF16 ? dpbf16_peak(6000000) : amx_peak_thread(1000000);
        if (tot > best) best = tot;
    }
    return best;
#else
    (void)l;
    return 0.0;
#endif
}
static const char* isa_peak_name[CPU_ISA_NUM] = {"", "AVX2 FMA (8 lanes x 2 flops)", "AVX-512 FMA (16 lanes x 2 flops)",
                                                  "AVX512-BF16 vdpbf16ps (16 lanes x 4 flops)", "AMX-BF16 tdpbf16ps (16384 flops per tile product)"};
static double g_peak = 0; /* the peak of this build's matmul implementation */

/* ---- 1. matmul shapes ----------------------------------------------------- */

/* C (M,N) = op(A) op(B) (+ C if acc), as the kernels call it; best of >= 3
   runs and >= 0.3 s; GFLOP/s */
static int g_lm = 0; /* bf16: the shape is the LM head's (its own classes, matmul_bf16.h) */
static double gemm_gflops(int ta, int tb, int M, int N, int K, int acc) {
    int lda = ta ? M : K, ldb = tb ? K : N;
    floatX* A = xalloc((size_t)M * K);
    floatX* B = xalloc((size_t)K * N);
    floatX* Cm = xalloc((size_t)M * N);
    fill(A, (size_t)M * K, 1); fill(B, (size_t)K * N, 1); fill(Cm, (size_t)M * N, 1);
    double best = 1e30, t0 = now_s();
    int reps = 0;
    do {
        double t1 = now_s();
#ifdef LLMC_BF16
        cpu_gemm_bf16((ta ? CPU_MM_DWEIGHT : tb ? CPU_MM_FWD : CPU_MM_DINP) + (g_lm ? 3 : 0), ta, tb, M, N, K, A, lda, B, ldb, acc, Cm, N, NULL);
#else
        cpu_sgemm_par(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, Cm, N);
#endif
        double dt = now_s() - t1;
        if (dt < best) best = dt;
        reps++;
    } while (reps < 3 || now_s() - t0 < 0.3);
    free(A); free(B); free(Cm);
    return 2.0 * M * N * K / best * 1e-9;
}

/* peaks as lines dev/bench.sh reads: "peak <what> <GFLOP/s> (...)": one
   line per ISA level this CPU runs (isa_peak), then the peak a program's
   share is measured against ("peak fp32-program", "peak bf16-program"):
   the register-loop peak of the instructions its matmuls run on: fp32
   FMAs of the level (AVX-512 at avx512 and above, AVX2 below) for the fp32
   program and for the bf16 program's fp32-copy path; AMX tiles for the
   bf16 primitive path (amx). */
static void bench_peak(void) {
    char isa[512];
    cpu_isa_describe(isa, sizeof(isa));
    printf("cpu %s\n", isa);
    double pk[CPU_ISA_NUM] = {0};
    for (int l = CPU_ISA_AVX2; l < CPU_ISA_NUM; l++) {
        pk[l] = isa_peak((CpuIsa)l);
        if (pk[l] > 0) printf("peak %s %.1f GFLOP/s (%s register loop, %d threads)\n", cpu_isa_names[l], pk[l], isa_peak_name[l], cpu_num_threads());
        else printf("peak %s 0 (%s)\n", cpu_isa_names[l], cpu_isa_skip_reason((CpuIsa)l));
    }
    double p32 = pk[CPU_ISA_AVX512] > 0 ? pk[CPU_ISA_AVX512] : pk[CPU_ISA_AVX2];
    const char* n32 = pk[CPU_ISA_AVX512] > 0 ? "avx512" : "avx2";
#ifdef LLMC_BF16
    /* the peak of each path: fp32 FMAs for the fp32-copy path; for oneDNN's
       bf16 primitive the instructions it runs at this level: AMX tiles
       (amx), vdpbf16ps (avx512_bf16), fp32 FMAs (avx512: oneDNN converts) */
    double best = 0;
    cpu_gemm_init();
    int saved[CPU_MM_NUM];
    memcpy(saved, cpu_gemm_state.fp32, sizeof(saved));
    double pprim = pk[CPU_ISA_AMX] > 0 ? pk[CPU_ISA_AMX] : pk[CPU_ISA_AVX512_BF16] > 0 ? pk[CPU_ISA_AVX512_BF16] : pk[CPU_ISA_AVX512];
    const char* nprim = pk[CPU_ISA_AMX] > 0 ? "amx" : pk[CPU_ISA_AVX512_BF16] > 0 ? "avx512_bf16" : "avx512";
    if (cpu_isa() >= CPU_ISA_AVX512) {
        int sq[][3] = {{2048, 2048, 2048}, {1024, 1536, 384}, {1024, 384, 1536}};
        cpu_gemm_set_all(0);
        for (int i = 0; i < 3; i++) {
            double g = gemm_gflops(0, 1, sq[i][0], sq[i][1], sq[i][2], 0);
            if (g > best) best = g;
        }
        memcpy(cpu_gemm_state.fp32, saved, sizeof(saved));
        printf("peak bf16-primitive %.1f GFLOP/s (oneDNN's bf16 matmul primitive, best of 2048^3 and two d6 shapes; oneDNN ISA %s; implementation %s)\n",
               best, cpu_isa_onednn_name(cpu_isa_state.onednn_isa), cpu_gemm_state.impl ? cpu_gemm_state.impl : "?");
        printf("peak bf16-primitive-path %.1f GFLOP/s (the %s peak: the instructions oneDNN's bf16 primitive runs at this level)\n", pprim, nprim);
    } else {
        printf("peak bf16-primitive 0 (%s)\n", cpu_isa_skip_reason(CPU_ISA_AVX512));
        printf("peak bf16-primitive-path 0 (primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE))\n");
    }
    printf("peak bf16-fp32-path %.1f GFLOP/s (fp32 FMAs on exact fp32 copies: the %s peak)\n", p32, n32);
    const char* mode = cpu_gemm_mode();
    g_peak = !strcmp(mode, "fp32") ? p32 : pprim > p32 ? pprim : p32;
    printf("peak bf16-program %.1f GFLOP/s (matmul paths in use: %s; %s)\n", g_peak, mode,
           !strcmp(mode, "fp32") ? "the fp32-copy path's peak" : !strcmp(mode, "primitive") ? "the primitive path's peak"
                                 : "per class: the higher of the two paths' peaks");
#else
    g_peak = p32;
    printf("peak fp32-program %.1f GFLOP/s (fp32 FMAs: the %s peak)\n", g_peak, n32);
#endif
    (void)n32;
    fflush(stdout);
}

static void bench_gemm(void) {
    printf("== %s matmuls as the kernels call them, %d OpenMP threads (GFLOP/s, best of runs)\n",
           PRECISION, cpu_num_threads());
#ifdef LLMC_BF16
    /* both paths where the primitive can run; * marks the path the
       trainer's choice takes for that class (matmul_choice.h) */
    int npaths = cpu_isa() >= CPU_ISA_AVX512 ? 2 : 1;
    if (npaths == 1) printf("(path primitive: unavailable on this CPU (oneDNN 2.6 needs AVX512_CORE); * = the path in use)\n");
    else printf("(* = the path in use for that class)\n");
    int saved[CPU_MM_NUM];
    memcpy(saved, cpu_gemm_state.fp32, sizeof(saved));
#else
    int npaths = 1;
#endif
    printf("%-24s %-10s %9s %9s %9s\n", "shape N x C -> OC", "path", "fwd", "dinp", "dweight");
    fflush(stdout);
    int shapes[][3] = {{1024, 384, 1152}, {1024, 384, 384},  {1024, 384, 1536},
                       {1024, 1536, 384}, {1024, 384, 8192}, {1024, 384, 50304}, {256, 768, 2304},
                       {256, 768, 3072},  {256, 3072, 768},  {256, 768, 8192}, {256, 768, 50304}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        int N = shapes[i][0], C = shapes[i][1], OC = shapes[i][2];
        g_lm = OC >= 8192;
        for (int path = 0; path < npaths; path++) {
            int fp32 = path == 0;
#ifdef LLMC_BF16
            cpu_gemm_set_all(fp32);
            const int lm = g_lm ? 3 : 0;
            const char mk[3] = {saved[CPU_MM_FWD + lm] == fp32 ? '*' : ' ', saved[CPU_MM_DINP + lm] == fp32 ? '*' : ' ',
                                saved[CPU_MM_DWEIGHT + lm] == fp32 ? '*' : ' '};
#else
            const char mk[3] = {' ', ' ', ' '};
#endif
            /* fwd: out(N,OC) = inp(N,C) W(OC,C)^T; dinp(N,C) += dout(N,OC) W;
               dweight(OC,C) += dout^T inp */
            double f = gemm_gflops(0, 1, N, OC, C, 0);
            double di = gemm_gflops(0, 0, N, C, OC, 1);
            double dw = gemm_gflops(1, 0, OC, C, N, 1);
            char name[64];
            snprintf(name, sizeof name, "%5d x %4d -> %5d", N, C, OC);
            printf("%-24s %-10s %8.1f%c %8.1f%c %8.1f%c\n", path ? "" : name, PRECISION[0] == 'f' ? "fp32" : fp32 ? "fp32-copy" : "primitive",
                   f, mk[0], di, mk[1], dw, mk[2]);
            fflush(stdout);
        }
    }
    g_lm = 0;
#ifdef LLMC_BF16
    memcpy(cpu_gemm_state.fp32, saved, sizeof(saved));
#endif
    /* attention, one (b,h) per thread: preatt = q k^T as the kernel does */
    {
        int B = 4, T = 256, C = 384, NH = 6;
        floatX* qkv = xalloc((size_t)B * T * 3 * C);
        floatX* out = xalloc((size_t)B * T * C);
        floatX* pre = xalloc((size_t)B * NH * T * T);
        floatX* att = xalloc((size_t)B * NH * T * T);
        floatX* dq = xalloc((size_t)B * T * 3 * C);
        fill(qkv, (size_t)B * T * 3 * C, 1);
        fill(out, (size_t)B * T * C, 1);
        fill(dq, (size_t)B * T * 3 * C, 1);
        double bf = 1e30, bb = 1e30;
        for (int r = 0; r < 10; r++) {
            double t0 = now_s();
            attention_forward(out, pre, att, qkv, B, T, C, NH);
            double t1 = now_s();
            attention_backward(dq, pre, pre, out, qkv, att, B, T, C, NH);
            double t2 = now_s();
            if (t1 - t0 < bf) bf = t1 - t0;
            if (t2 - t1 < bb) bb = t2 - t1;
        }
        /* causal FLOPs: 2 products fwd, 4 bwd, each 2*T*T/2*hs per head */
        double fl = (double)B * NH * T * T * (C / NH);
        printf("attention B4 T256 C384 NH6: fwd %.2f ms (%.1f GFLOP/s causal), bwd %.2f ms "
               "(%.1f GFLOP/s causal)\n", bf * 1e3, 2 * fl / bf * 1e-9, bb * 1e3,
               4 * fl / bb * 1e-9);
        free(qkv); free(out); free(pre); free(att); free(dq);
    }
}

/* ---- 1b. the other kernels, one at a time (d6 sizes) ------------------------ */

#define BEST_OF(reps, stmt) ({ double b_ = 1e30; for (int r_ = 0; r_ < (reps); r_++) { \
    double t_ = now_s(); stmt; t_ = now_s() - t_; if (t_ < b_) b_ = t_; } b_ * 1e3; })

/* ---- 3. memory bandwidth --------------------------------------------------- */

/* STREAM's triad a[i] = b[i] + s c[i] on three arrays of 2^25 floats (128
   MiB each, far beyond the caches), all OpenMP threads, static schedule
   (each thread touches its part first, so its pages are local), best of
   5 runs; GB/s with STREAM's count of 12 bytes per element (two reads, one
   write; the write-allocate read of a is not counted). */
static double stream_triad(void) {
    const size_t n = (size_t)1 << 25;
    float *a = falloc(n), *b = falloc(n), *c = falloc(n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        const float sc = 0.5f + 0.001f * r;
        double t0 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + sc * c[i];
        double t = now_s() - t0;
        if (r > 0 && t < best) best = t;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a); free(b); free(c);
    return 12.0 * n / best * 1e-9;
}
static void bench_stream(void) {
    printf("stream triad %.1f GB/s (a = b + s c, 3 x 128 MiB fp32 arrays, %d threads, best of 5; STREAM's count: 12 bytes per element)\n",
           stream_triad(), cpu_num_threads());
    fflush(stdout);
}

static void bench_elem(void) {
    const int B = 4, T = 256, C = 384, NH = 6, N = B * T, V = 50257, Vp = 50304;
    const size_t NC = (size_t)N * C;
    floatX *x = xalloc(4 * NC), *y = xalloc(4 * NC), *z = xalloc(4 * NC), *w = xalloc(C), *b = xalloc(C);
    floatX *dw = xalloc(C), *db = xalloc(C), *qkv = xalloc(3 * NC), *dqkv = xalloc(3 * NC);
    floatX *att = xalloc((size_t)B * NH * T * T), *pre = xalloc((size_t)B * NH * T * T);
    floatX* logits = xalloc((size_t)N * Vp);
    float *mean = falloc(N), *rstd = falloc(N), *losses = falloc(N);
    size_t P = 10u << 20; /* AdamW on 10M parameters */
    floatX *par = xalloc(P), *grd = xalloc(P);
    float *m = falloc(P), *v = falloc(P), *master = falloc(P);
    int* tgt = (int*)malloc(sizeof(int) * N);
    fill(x, 4 * NC, 1); fill(y, 4 * NC, 1); fill(z, 4 * NC, 1); fill(w, C, 1); fill(b, C, 1);
    fill(dw, C, 1); fill(db, C, 1); fill(qkv, 3 * NC, 1); fill(dqkv, 3 * NC, 1); fill(par, P, 1); fill(grd, P, 0.01f);
    for (size_t i = 0; i < P; i++) { m[i] = 0; v[i] = 0; master[i] = ldx(par[i]); }
    for (int i = 0; i < N; i++) tgt[i] = (i * 7919) % V;
    printf("== %s kernels one at a time, d6 sizes (B4 T256 C384 NH6), %d threads, ms (best of 5)\n", PRECISION,
           cpu_num_threads());
    printf("   %-34s %8.2f\n", "layernorm_forward (N,C)", BEST_OF(5, layernorm_forward(y, mean, rstd, x, w, b, N, C)));
    printf("   %-34s %8.2f\n", "layernorm_backward (N,C)", BEST_OF(5, layernorm_backward(z, dw, db, y, x, w, mean, rstd, N, C)));
    printf("   %-34s %8.2f\n", "gelu_forward (N,4C)", BEST_OF(5, gelu_forward(y, x, 4 * NC)));
    printf("   %-34s %8.2f\n", "gelu_backward (N,4C)", BEST_OF(5, gelu_backward(z, x, y, 4 * NC)));
    printf("   %-34s %8.2f\n", "residual_forward (N,C)", BEST_OF(5, residual_forward(z, x, y, NC)));
    printf("   %-34s %8.2f\n", "attention_forward", BEST_OF(5, attention_forward(y, pre, att, qkv, B, T, C, NH)));
    printf("   %-34s %8.2f\n", "attention_backward", BEST_OF(5, attention_backward(dqkv, pre, pre, y, qkv, att, B, T, C, NH)));
    fill(logits, (size_t)N * Vp, 2);
    printf("   %-34s %8.2f\n", "fused_classifier (N,Vp) no grad", BEST_OF(3, fused_classifier(logits, losses, tgt, N, V, Vp, 0.0f)));
    printf("   %-34s %8.2f\n", "fused_classifier (N,Vp) with grad", BEST_OF(1, fused_classifier(logits, losses, tgt, N, V, Vp, 1.0f / N)));
    printf("   %-34s %8.2f\n", "sum_squares (10M)", BEST_OF(5, sum_squares(grd, P)));
#ifdef LLMC_BF16
    printf("   %-34s %8.2f\n", "adamw_update (10M, fp32 master)", BEST_OF(5, adamw_update(par, master, grd, m, v, P, 1e-3f, 0.9f, 0.95f, 0.5f, 0.5f, 1e-8f, 0.1f, 1.0f)));
#else
    printf("   %-34s %8.2f\n", "adamw_update (10M)", BEST_OF(5, adamw_update(par, NULL, grd, m, v, P, 1e-3f, 0.9f, 0.95f, 0.5f, 0.5f, 1e-8f, 0.1f, 1.0f)));
#endif
    free(x); free(y); free(z); free(w); free(b); free(dw); free(db); free(qkv); free(dqkv); free(att); free(pre);
    free(logits); free(mean); free(rstd); free(losses); free(par); free(grd); free(m); free(v); free(master); free(tgt);
}

/* ---- 2. a whole training step -------------------------------------------- */

enum { G_MATMUL, G_ATTN, G_LN, G_GELU_RES, G_CLS, G_ENC, G_OPT, G_ZERO, G_N };
static const char* gname[G_N] = {"matmul", "attention", "layernorm", "gelu+residual",
                                 "classifier", "encoder", "gradnorm+adamw", "zeroing"};
static double gtime[G_N];
static double tmark;
static void tick(int g) { double t = now_s(); gtime[g] += t - tmark; tmark = t; }

typedef struct {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb,
        *fcprojw, *fcprojb;
} Layer;
typedef struct {
    floatX *ln1, *qkv, *atty, *preatt, *att, *attproj, *res2, *ln2, *fch, *fchg, *fcproj, *res3;
    float *ln1m, *ln1r, *ln2m, *ln2r;
} Acts;

/* lays out the parameters of one block (or counts them if base is NULL) */
static size_t layer_map(Layer* L, floatX* base, int C) {
    size_t sz[12] = {(size_t)C, (size_t)C, (size_t)3 * C * C, (size_t)3 * C, (size_t)C * C,
                     (size_t)C, (size_t)C, (size_t)C, (size_t)4 * C * C, (size_t)4 * C,
                     (size_t)4 * C * C, (size_t)C};
    floatX** f[12] = {&L->ln1w, &L->ln1b, &L->qkvw, &L->qkvb, &L->attprojw, &L->attprojb,
                      &L->ln2w, &L->ln2b, &L->fcw, &L->fcb, &L->fcprojw, &L->fcprojb};
    size_t off = 0;
    for (int i = 0; i < 12; i++) {
        if (base) *f[i] = base + off;
        off += sz[i];
    }
    return off;
}
/* the LM head's products follow (bf16: their own path classes, matmul_bf16.h) */
static void lm_head(int on) {
#ifdef LLMC_BF16
    cpu_gemm_lm_head(on);
#else
    (void)on;
#endif
}
static void set_const(floatX* p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = stx(v);
}

static void bench_step(int NL, int NH, int C, int B, int T, int steps) {
    const int V = 50257, Vp = 50304, maxT = T, N = B * T;
    size_t root = (size_t)Vp * C + (size_t)maxT * C + 2 * (size_t)C;
    size_t per = layer_map(NULL, NULL, C);
    size_t P = root + per * NL;
    floatX *params = xalloc(P), *grads = xalloc(P);
    float *m = falloc(P), *v = falloc(P);
    fill(params, P, 0.02f);
    memset(m, 0, P * sizeof(float));
    memset(v, 0, P * sizeof(float));
    Layer* Lp = (Layer*)malloc(sizeof(Layer) * NL);
    Layer* Lg = (Layer*)malloc(sizeof(Layer) * NL);
    floatX *wte = params, *wpe = wte + (size_t)Vp * C, *lnfw = wpe + (size_t)maxT * C,
           *lnfb = lnfw + C;
    floatX *dwte = grads, *dwpe = dwte + (size_t)Vp * C, *dlnfw = dwpe + (size_t)maxT * C,
           *dlnfb = dlnfw + C;
    for (int l = 0; l < NL; l++) {
        layer_map(&Lp[l], params + root + per * l, C);
        layer_map(&Lg[l], grads + root + per * l, C);
        set_const(Lp[l].ln1w, C, 1.0f); set_const(Lp[l].ln2w, C, 1.0f);
        set_const(Lp[l].ln1b, C, 0.0f); set_const(Lp[l].ln2b, C, 0.0f);
    }
    set_const(lnfw, C, 1.0f); set_const(lnfb, C, 0.0f);
    /* mixed precision: fp32 master weights (the bf16 program's 2+2+12) */
    float* master = NULL;
#ifdef LLMC_BF16
    master = falloc(P);
    for (size_t i = 0; i < P; i++) master[i] = ldx(params[i]);
#endif
    Acts* A = (Acts*)malloc(sizeof(Acts) * NL);
    size_t NC = (size_t)N * C, att_sz = (size_t)B * NH * T * T;
    for (int l = 0; l < NL; l++) {
        A[l].ln1 = xalloc(NC); A[l].ln1m = falloc(N); A[l].ln1r = falloc(N);
        A[l].qkv = xalloc(3 * NC); A[l].atty = xalloc(NC); A[l].preatt = xalloc(att_sz);
        A[l].att = xalloc(att_sz); A[l].attproj = xalloc(NC); A[l].res2 = xalloc(NC);
        A[l].ln2 = xalloc(NC); A[l].ln2m = falloc(N); A[l].ln2r = falloc(N);
        A[l].fch = xalloc(4 * NC); A[l].fchg = xalloc(4 * NC); A[l].fcproj = xalloc(NC);
        A[l].res3 = xalloc(NC);
    }
    floatX *x0 = xalloc(NC), *lnf = xalloc(NC);
    float *lnfm = falloc(N), *lnfr = falloc(N);
    floatX* logits = xalloc((size_t)N * Vp);
    float* losses = falloc(N);
    floatX *dres = xalloc(NC), *dln = xalloc(NC), *dqkv = xalloc(3 * NC), *datty = xalloc(NC);
    floatX *dfch = xalloc(4 * NC), *dfchg = xalloc(4 * NC);
    floatX *dpre = xalloc(att_sz), *datt = xalloc(att_sz);
    int *inp = (int*)malloc(sizeof(int) * N), *tgt = (int*)malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) inp[i] = (int)((frnd() + 1) * 0.5f * V) % V;
    for (int i = 0; i < N; i++) tgt[i] = i + 1 < N ? inp[i + 1] : 0;
    const size_t X = sizeof(floatX);

    /* model FLOPs per token: 6 per matmul weight (fwd 2, bwd 4) plus
       attention's two T x T products, counted causal (half): 6*T*C per layer */
    double mm_params = (double)Vp * C + (double)NL * 12 * C * C;
    double flops_tok = 6.0 * mm_params + (double)NL * 6.0 * T * C;
    printf("== %s training step L%d NH%d C%d B%d T%d: %.2fM params, %.1f MFLOP/token, "
           "%d threads\n", PRECISION, NL, NH, C, B, T, P / 1e6, flops_tok / 1e6, cpu_num_threads());
    double best = 1e30, total = 0;
    double gbest[G_N], gmin[G_N];
    for (int g = 0; g < G_N; g++) gmin[g] = 1e30;
    for (int s = 0; s <= steps; s++) {
        memset(gtime, 0, sizeof gtime);
        double t0 = now_s();
        tmark = t0;
        /* forward */
        encoder_forward(x0, inp, wte, wpe, B, T, C); tick(G_ENC);
        for (int l = 0; l < NL; l++) {
            Layer* w = &Lp[l]; Acts* a = &A[l];
            floatX* res = l == 0 ? x0 : A[l - 1].res3;
            layernorm_forward(a->ln1, a->ln1m, a->ln1r, res, w->ln1w, w->ln1b, N, C); tick(G_LN);
            matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * C); tick(G_MATMUL);
            attention_forward(a->atty, a->preatt, a->att, a->qkv, B, T, C, NH); tick(G_ATTN);
            matmul_forward(a->attproj, a->atty, w->attprojw, w->attprojb, N, C, C); tick(G_MATMUL);
            residual_forward(a->res2, res, a->attproj, NC); tick(G_GELU_RES);
            layernorm_forward(a->ln2, a->ln2m, a->ln2r, a->res2, w->ln2w, w->ln2b, N, C); tick(G_LN);
            matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, N, C, 4 * C); tick(G_MATMUL);
            gelu_forward(a->fchg, a->fch, 4 * NC); tick(G_GELU_RES);
            matmul_forward(a->fcproj, a->fchg, w->fcprojw, w->fcprojb, N, 4 * C, C); tick(G_MATMUL);
            residual_forward(a->res3, a->res2, a->fcproj, NC); tick(G_GELU_RES);
        }
        floatX* resL = A[NL - 1].res3;
        layernorm_forward(lnf, lnfm, lnfr, resL, lnfw, lnfb, N, C); tick(G_LN);
        lm_head(1); matmul_forward(logits, lnf, wte, NULL, N, C, Vp); lm_head(0); tick(G_MATMUL);
        fused_classifier(logits, losses, tgt, N, V, Vp, 1.0f / N); tick(G_CLS);
        double loss = 0;
        for (int i = 0; i < N; i++) loss += losses[i];
        loss /= N;
        /* backward */
        memset(grads, 0, P * X);
        memset(dres, 0, NC * X);
        memset(dln, 0, NC * X); tick(G_ZERO);
        lm_head(1); matmul_backward(dln, dwte, NULL, logits, lnf, wte, N, C, Vp); lm_head(0); tick(G_MATMUL);
        layernorm_backward(dres, dlnfw, dlnfb, dln, resL, lnfw, lnfm, lnfr, N, C); tick(G_LN);
        for (int l = NL - 1; l >= 0; l--) {
            Layer* w = &Lp[l]; Layer* g = &Lg[l]; Acts* a = &A[l];
            floatX* res = l == 0 ? x0 : A[l - 1].res3;
            memset(dfchg, 0, 4 * NC * X); memset(dfch, 0, 4 * NC * X);
            memset(dln, 0, NC * X); memset(datty, 0, NC * X);
            memset(dqkv, 0, 3 * NC * X); tick(G_ZERO);
            matmul_backward(dfchg, g->fcprojw, g->fcprojb, dres, a->fchg, w->fcprojw, N, 4 * C, C); tick(G_MATMUL);
            gelu_backward(dfch, a->fch, dfchg, 4 * NC); tick(G_GELU_RES);
            matmul_backward(dln, g->fcw, g->fcb, dfch, a->ln2, w->fcw, N, C, 4 * C); tick(G_MATMUL);
            layernorm_backward(dres, g->ln2w, g->ln2b, dln, a->res2, w->ln2w, a->ln2m, a->ln2r, N, C); tick(G_LN);
            matmul_backward(datty, g->attprojw, g->attprojb, dres, a->atty, w->attprojw, N, C, C); tick(G_MATMUL);
            attention_backward(dqkv, dpre, datt, datty, a->qkv, a->att, B, T, C, NH); tick(G_ATTN);
            memset(dln, 0, NC * X); tick(G_ZERO);
            matmul_backward(dln, g->qkvw, g->qkvb, dqkv, a->ln1, w->qkvw, N, C, 3 * C); tick(G_MATMUL);
            layernorm_backward(dres, g->ln1w, g->ln1b, dln, res, w->ln1w, a->ln1m, a->ln1r, N, C); tick(G_LN);
        }
        encoder_backward(dwte, dwpe, dres, inp, B, T, C); tick(G_ENC);
        /* optimizer: clip to norm 1, AdamW */
        double norm = sqrt(sum_squares(grads, P));
        float gs = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        float b1 = 0.9f, b2 = 0.95f;
        adamw_update(params, master, grads, m, v, P, 1e-3f, b1, b2, 1.0f - powf(b1, s + 1),
                     1.0f - powf(b2, s + 1), 1e-8f, 0.0f, gs); tick(G_OPT);
        double dt = now_s() - t0;
        printf("step %d: loss %.4f  grad norm %.3f  %.1f ms  %.0f tok/s\n", s, loss, norm,
               dt * 1e3, N / dt);
        if (s > 0) { /* step 0 is warm-up */
            total += dt;
            for (int g = 0; g < G_N; g++)
                if (gtime[g] < gmin[g]) gmin[g] = gtime[g];
            if (dt < best) { best = dt; memcpy(gbest, gtime, sizeof gbest); }
        }
    }
    if (steps > 0) {
        double gf = flops_tok * N / best * 1e-9;
        printf("best step %.1f ms = %.0f tokens/s, %.1f GFLOP/s model FLOPs", best * 1e3,
               N / best, gf);
        if (g_peak > 0) printf(" = %.0f%% of the %s peak", 100 * gf / g_peak, PRECISION);
        printf("; mean %.0f tok/s; mean step %.1f ms\n", N * steps / total, total / steps * 1e3);
        /* on a shared machine other processes slow random parts of random
           steps: the sum over kernel groups of each group's fastest time is
           the step time of an undisturbed machine, up to noise */
        double smin = 0;
        for (int g = 0; g < G_N; g++) smin += gmin[g];
        printf("sum of per-group minima %.1f ms = %.0f tokens/s, %.1f GFLOP/s", smin * 1e3,
               N / smin, flops_tok * N / smin * 1e-9);
        if (g_peak > 0) printf(" = %.0f%% of the %s peak", 100 * flops_tok * N / smin * 1e-9 / g_peak, PRECISION);
        printf("\n   %-15s %10s %8s %10s\n", "group", "best step", "", "group min");
        for (int g = 0; g < G_N; g++)
            printf("   %-15s %8.1f ms  %5.1f%%  %8.1f ms\n", gname[g], gbest[g] * 1e3,
                   100 * gbest[g] / best, gmin[g] * 1e3);
    }
    for (int l = 0; l < NL; l++) {
        floatX* f[12] = {A[l].ln1, A[l].qkv, A[l].atty, A[l].preatt, A[l].att, A[l].attproj,
                         A[l].res2, A[l].ln2, A[l].fch, A[l].fchg, A[l].fcproj, A[l].res3};
        for (int i = 0; i < 12; i++) free(f[i]);
        free(A[l].ln1m); free(A[l].ln1r); free(A[l].ln2m); free(A[l].ln2r);
    }
    free(A); free(Lp); free(Lg); free(params); free(grads); free(m); free(v); free(master);
    free(x0); free(lnf); free(lnfm); free(lnfr); free(logits); free(losses); free(dres);
    free(dln); free(dqkv); free(datty); free(dfch); free(dfchg); free(dpre); free(datt);
    free(inp); free(tgt);
}

int main(int argc, char** argv) {
    /* the trainer's allocator (backend_preinit, llmc/cpu/backend.h): one
       arena, a 128 KiB mmap threshold, huge pages for glibc's mapped blocks
       only with LLMC_MALLOC_HUGETLB=1 (a re-exec), so that oneDNN's per-call
       packing buffers cost the same here as in the trainer (glibc's default
       keeps them in the heap: this step was 615-639 ms at d6 fp32 on the
       Zen 5 VM with it, against the trainer's 890-930) */
    cpu_malloc_hugepages(argv);
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    cpu_isa_init();           /* the ISA level (LLMC_CPU_ISA caps it), before oneDNN's first use */
    if (cpu_isa_error()[0]) { fprintf(stderr, "error: %s\n", cpu_isa_error()); return 1; }
    cpu_blas_fast_path(argv); /* OpenBLAS: re-exec with OPENBLAS_CORETYPE if needed */
#ifdef LLMC_BF16
    {   /* the trainer's choice of paths (its calibration file), unless LLMC_BF16_MATMUL forces one */
        const char* e = getenv("LLMC_BF16_MATMUL_FILE");
        char path[4200], why[600], desc[1600];
        snprintf(path, sizeof(path), "%s", e && e[0] ? e : "build/fit/train_gpt_cpu_bf16.matmul");
        CpuGemmChoice ch;
        memset(&ch, 0, sizeof(ch));
        const char* f = getenv("LLMC_BF16_MATMUL");
        if ((!f || !f[0]) && cpu_gemm_read_file(path, &ch, why, sizeof(why))) {
            ch.how = CPU_GEMM_BY_FILE;
            snprintf(ch.where, sizeof(ch.where), "%s", path);
            if (cpu_isa() < CPU_ISA_AVX512) { ch.how = CPU_GEMM_BY_UNAVAILABLE; cpu_gemm_set_all(1); for (int k = 0; k < CPU_MM_NUM; k++) ch.fp32[k] = 1; }
            cpu_gemm_apply(&ch);
        } else if (!f || !f[0]) {
            printf("note: %s: %s: the rule of a standalone program\n", path, why);
        }
        cpu_gemm_describe(desc, sizeof(desc));
        printf("build: bf16 (matmul: %s)\n", desc);
    }
#elif !defined(LLMC_USE_DNNL) && defined(OPENBLAS_THREAD)
    printf("BLAS: %s (corename %s)\n", openblas_get_config(), openblas_get_corename());
#elif defined(LLMC_USE_DNNL)
    printf("BLAS: oneDNN dnnl_sgemm\n");
#else
    printf("BLAS: CBLAS (not OpenBLAS)\n");
#endif
#if !defined(LLMC_BF16)
#ifdef LLMC_BLAS_THREADED
    printf("mode: big products threaded by the BLAS (LLMC_BLAS_THREADED)\n");
#else
    printf("mode: big products split over OpenMP threads, BLAS single-threaded\n");
#endif
#endif
    int all = argc < 2;
    if (argc >= 2 && strcmp(argv[1], "stream") == 0) { bench_stream(); return 0; }
    bench_peak();
    if (argc >= 2 && strcmp(argv[1], "peak") == 0) return 0;
    if (all || strcmp(argv[1], "gemm") == 0) bench_gemm();
    if (all) bench_stream();
    if (all || strcmp(argv[1], "elem") == 0) bench_elem();
    if (argc >= 7 && strcmp(argv[1], "step") == 0) {
        bench_step(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
                   argc >= 8 ? atoi(argv[7]) : 3);
    } else if (all) {
        bench_step(6, 6, 384, 4, 256, 8);   /* d6 */
        bench_step(12, 12, 768, 4, 64, 6);  /* GPT-2 124M */
    }
    return 0;
}
