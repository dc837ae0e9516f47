/*
 * llmc/cpu/global_norm.h -- sum of squares of a shard (the global grad norm): the CPU kernel(s), twin
 * of llmc/cuda/global_norm.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_GLOBAL_NORM_H
#define LLMC_CPU_GLOBAL_NORM_H

#include "common.h"

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
        for (size_t i = lo; i < hi; i++) acc += (double)ldx(x[i]) * (double)ldx(x[i]);
        part[ith] = acc;
    }
    double s = 0.0;
    for (int i = 0; i < nth; i++) s += part[i];
    return s;
}

/* The largest x[i]^2 over n elements (in double, exact), or NaN when an
   element is not finite (--invariant 1's grad norm, zero_grad_norm). */
static inline double max_square(const floatX* x, size_t n) {
    double m = 0.0;
    int bad = 0;
#pragma omp parallel for reduction(max : m) reduction(| : bad) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = ldx(x[i]);
        bad |= !isfinite(v);
        double s = (double)v * (double)v;
        m = s > m ? s : m;
    }
    return bad ? NAN : m;
}

/* The squares of n elements on an integer grid (--invariant 1): with
   scale = 2^e a power of two such that max x^2 * scale < 2^31, each
   y = x^2 * scale (exact in double) is split into its integer part and its
   fraction times 2^31 (both truncated: a loss below 2^-62 max x^2 per
   element); hi[0] += the integer parts, lo[0] += the fractions. Integer sums
   are associative: the result does not depend on how the elements are split
   among threads, shards or ranks (n < 2^32 elements in all: no overflow). */
static inline void sum_squares_fixed(const floatX* x, size_t n, double scale, unsigned long long* hi, unsigned long long* lo) {
    unsigned long long h = 0, l = 0;
#pragma omp parallel for reduction(+ : h, l) schedule(static)
    for (size_t i = 0; i < n; i++) {
        double v = (double)ldx(x[i]);
        double y = v * v * scale;
        unsigned long long yi = (unsigned long long)y;
        h += yi;
        l += (unsigned long long)((y - (double)yi) * 2147483648.0);
    }
    *hi += h; *lo += l;
}

#endif /* LLMC_CPU_GLOBAL_NORM_H */
