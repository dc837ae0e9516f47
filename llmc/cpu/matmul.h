/*
 * llmc/cpu/matmul.h -- the linear layer (matrix product + bias), forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/matmul.cuh (same names and signatures). Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include "common.h"

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

#endif /* LLMC_CPU_MATMUL_H */
