/*
 * llmc/cpu/matmul.h -- the linear layer (matrix product + bias), forward and
 * backward: the CPU kernel, twin of llmc/cuda/matmul.cuh (same names and
 * signatures), for gpt.h through kernels.h. The fp32 program multiplies on
 * the sgemm (common.h), the bf16 program on cpu_gemm_bf16 (matmul_bf16.h);
 * under --invariant 1 both run the fixed tiles and trees of
 * matmul_invariant.h. It includes the bf16 buffers' prediction
 * (matmul_bf16_predict.h), so that one include gives every matmul name.
 * Conventions: common.h.
 */
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include "common.h"
#include "matmul_bf16.h"
#include "matmul_invariant.h"
#include "matmul_bf16_predict.h"

#ifdef LLMC_BF16
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
    const int cls = cpu_gemm_state.lm_head ? CPU_MM_LM_FWD : CPU_MM_FWD;
    if (cpu_inv_T && N % cpu_inv_rows(cpu_inv_T) == 0) {   /* --invariant 1: fixed tiles on the class's path */
        if (cpu_gemm_path(cls)) cpu_inv_gemm_rows_bf16(out, inp, weight, bias, N, C, OC, 1, 0);
        else cpu_inv_gemm_rows_prim(out, inp, weight, bias, N, C, OC, 1, 0);
        return;
    }
    cpu_gemm_bf16(cls, 0, 1, N, OC, C, inp, C, weight, C, 0, out, OC, bias);
}

/* Backward of matmul_forward, all three accumulate, one rounding each:
     dinp (N,C)     += dout (N,OC) @ weight (OC,C)       (skipped if NULL)
     dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
     dbias (OC)     += sum over the N rows of dout      (skipped if NULL) */
static inline void matmul_backward(floatX* dinp, floatX* dweight,
                                   floatX* dbias, const floatX* dout,
                                   const floatX* inp, const floatX* weight,
                                   int N, int C, int OC) {
    const int lm = cpu_gemm_state.lm_head ? 3 : 0;
    if (cpu_inv_T && N % cpu_inv_T == 0) {   /* --invariant 1: fixed tiles and trees on each class's path */
        if (dinp && cpu_gemm_path(CPU_MM_DINP + lm)) cpu_inv_gemm_rows_bf16(dinp, dout, weight, NULL, N, OC, C, 0, 1);
        else if (dinp) cpu_inv_gemm_rows_prim(dinp, dout, weight, NULL, N, OC, C, 0, 1);
        cpu_inv_dweight_bf16(dweight, dout, inp, N, C, OC, !cpu_gemm_path(CPU_MM_DWEIGHT + lm));
        if (dbias) cpu_inv_dbias(dbias, dout, N, OC);
        return;
    }
    if (dinp) cpu_gemm_bf16(CPU_MM_DINP + lm, 0, 0, N, C, OC, dout, OC, weight, C, 1, dinp, C, NULL);
    cpu_gemm_bf16(CPU_MM_DWEIGHT + lm, 1, 0, OC, C, N, dout, OC, inp, C, 1, dweight, C, NULL);
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
