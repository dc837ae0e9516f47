/*
 * llmc/cpu/global_norm.h -- sum of squares of a shard (the global grad norm): the CPU kernel(s), twin
 * of llmc/cuda/global_norm.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_GLOBAL_NORM_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_GLOBAL_NORM_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/global_norm.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_GLOBAL_NORM_H_AVX512
#endif
#define LLMC_CPU_GLOBAL_NORM_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* optimizer-side kernels                                                   */

/* sum_i x[i]^2 over n elements (any shard), squares and sums in double.
   Order: each thread's range [lo, hi) (cpu_split_range, 1024-element
   aligned) in CPU_SSQ_LANES explicit lanes (lane j sums the elements
   lo + j, lo + j + 16, ...), the lanes folded by a fixed pairwise tree
   (j + 8 into j, then + 4, + 2, + 1), the range's last hi - lo mod 16
   elements summed in order and added last; the threads' partials then in
   thread order. The lanes are an array, not a vectorized reduction, so the
   order is the same in both compiles (elementwise.h) at any vector width.
   (Before 12-08 one `omp simd reduction`: gcc left it scalar in the bf16
   program, one FMA chain per thread, 74 ms a step at 124M on a Zen 4,
   10% of the step; this order changes the grad norm's last bits.) */
#define CPU_SSQ_LANES 16
static inline double CPU_EW(sum_squares)(const floatX* x, size_t n) {
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
        double acc[CPU_SSQ_LANES] = {0};
        size_t i = lo;
        for (; i + CPU_SSQ_LANES <= hi; i += CPU_SSQ_LANES) {
#pragma omp simd
            for (int j = 0; j < CPU_SSQ_LANES; j++) {
                double v = (double)ldx(x[i + (size_t)j]);
                acc[j] += v * v;
            }
        }
        double tail = 0.0;
        for (; i < hi; i++) tail += (double)ldx(x[i]) * (double)ldx(x[i]);
        for (int w = CPU_SSQ_LANES / 2; w >= 1; w /= 2)
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        part[ith] = acc[0] + tail;
    }
    double s = 0.0;
    for (int i = 0; i < nth; i++) s += part[i];
    return s;
}

/* The largest x[i]^2 over n elements (in double, exact), or NaN when an
   element is not finite (--invariant 1's grad norm, zero_grad_norm). Works
   on the bits: |x| as an unsigned integer orders the finite magnitudes
   (denormals included) as the values do, and the infinities and NaNs lie
   above all of them (0x7f800000 and up), so one integer max (vectorized)
   gives both the largest |x| and whether any element is not finite; the
   square of the largest |x| is the largest square (exact in double: a
   float's square needs 48 bits and lies in [2^-298, 2^256]). */
static inline double CPU_EW(max_square)(const floatX* x, size_t n) {
    uint32_t mb = 0;
#pragma omp parallel for simd reduction(max : mb) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = ldx(x[i]);
        uint32_t b;
        memcpy(&b, &v, sizeof(b));
        b &= 0x7fffffffu;
        mb = b > mb ? b : mb;
    }
    if (mb >= 0x7f800000u) return NAN;
    float a;
    memcpy(&a, &mb, sizeof(a));
    return (double)a * (double)a;
}

/* The squares of n elements on an integer grid (--invariant 1): with
   scale = 2^e a power of two such that max x^2 * scale < 2^31 (the caller's
   max_square over every element, all ranks), each y = x^2 * scale (exact in
   double) is split into its integer part and its fraction times 2^31 (both
   truncated: a loss below 2^-62 max x^2 per element); hi[0] += the integer
   parts, lo[0] += the fractions. Integer sums are associative: the result
   does not depend on how the elements are split among threads, shards or
   ranks (n < 2^32 elements in all: no overflow). Both parts are below 2^31,
   so each is an exact int32 truncation (vcvttpd2dq: AVX2 has no vector
   double -> uint64), widened to 64 bits before the sum: the same integers as
   a conversion to uint64, vectorized. A y of 2^31 or more (a scale that
   breaks the contract) or a NaN would give INT32_MIN: the caller must not
   pass one. */
static inline void CPU_EW(sum_squares_fixed)(const floatX* x, size_t n, double scale, unsigned long long* hi, unsigned long long* lo) {
    long long h = 0, l = 0;
#pragma omp parallel for simd reduction(+ : h, l) schedule(static)
    for (size_t i = 0; i < n; i++) {
        double v = (double)ldx(x[i]);
        double y = v * v * scale;
        int32_t yi = (int32_t)y;
        int32_t yf = (int32_t)((y - (double)yi) * 2147483648.0);
        h += yi;
        l += yf;
    }
    *hi += (unsigned long long)h; *lo += (unsigned long long)l;
}

#endif /* LLMC_CPU_GLOBAL_NORM_H */
