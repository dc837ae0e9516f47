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

#endif /* LLMC_CPU_GLOBAL_NORM_H */
