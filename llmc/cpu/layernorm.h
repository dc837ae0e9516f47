/*
 * llmc/cpu/layernorm.h -- LayerNorm forward and backward: the CPU kernel(s), twin
 * of llmc/cuda/layernorm.cuh (same names and signatures). Conventions: common.h.
 */
#if !defined(LLMC_CPU_LAYERNORM_H) || (defined(CPU_EW_AGAIN) && !defined(LLMC_CPU_LAYERNORM_H_AVX512))
#ifndef CPU_EW
#error "llmc/cpu/layernorm.h: include llmc/cpu/kernels.h, which compiles it once per ISA level (elementwise.h)"
#endif
#ifdef CPU_EW_AGAIN
#define LLMC_CPU_LAYERNORM_H_AVX512
#endif
#define LLMC_CPU_LAYERNORM_H

#include "common.h"

/* ------------------------------------------------------------------------ */
/* layernorm                                                                */

/* For each of N rows x (C): mean = sum x / C, var = sum (x-mean)^2 / C
   (biased, two-pass), rstd = 1/sqrt(var + 1e-5),
   out = (x - mean) * rstd * weight + bias. mean, rstd (N) are saved for the
   backward. Sums in float over 16 lanes, then double. Writes out. */
static inline void CPU_EW(layernorm_forward)(floatX* out, float* mean, float* rstd,
                                     const floatX* inp, const floatX* weight,
                                     const floatX* bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const floatX* x = inp + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s) safelen(CPU_EW_LANES)
        for (int i = 0; i < C; i++) s += ldx(x[i]);
        float m = (float)((double)s / C);
        float v = 0.0f;
#pragma omp simd reduction(+ : v) safelen(CPU_EW_LANES)
        for (int i = 0; i < C; i++) {
            float d = ldx(x[i]) - m;
            v += d * d;
        }
        float r = (float)(1.0 / sqrt((double)v / C + 1e-5));
        floatX* o = out + (size_t)n * C;
#pragma omp simd
        for (int i = 0; i < C; i++) o[i] = stx((ldx(x[i]) - m) * r * ldx(weight[i]) + ldx(bias[i]));
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
static inline void CPU_EW(layernorm_backward)(floatX* dinp, floatX* dweight,
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
#pragma omp simd reduction(+ : sg, sgx) safelen(CPU_EW_LANES)
            for (int i = 0; i < C; i++) {
                float g = ldx(d[i]) * ldx(weight[i]);
                sg += g;
                sgx += g * (ldx(x[i]) - m) * r;
            }
            float mg = sg / C, mgx = sgx / C;
            floatX* di = dinp + (size_t)n * C;
#pragma omp simd
            for (int i = 0; i < C; i++) {
                float xh = (ldx(x[i]) - m) * r;
                di[i] = stx(ldx(di[i]) + r * (ldx(d[i]) * ldx(weight[i]) - mg - xh * mgx));
            }
        }
        int ith, nth;
        cpu_thread_id(&ith, &nth);
        size_t lo, hi;
        cpu_split_range((size_t)C, ith, nth, 16, &lo, &hi);
        if (hi > lo && cpu_inv_T && N % cpu_inv_T == 0) {   /* layout-invariant mode: per sequence, then a pairwise tree */
            cpu_inv_column_sums(dweight, dout, inp, mean, rstd, N / cpu_inv_T, cpu_inv_T, (size_t)C, lo, hi);
            cpu_inv_column_sums(dbias, dout, NULL, NULL, NULL, N / cpu_inv_T, cpu_inv_T, (size_t)C, lo, hi);
        } else if (hi > lo) {
            size_t w = hi - lo;
            double* aw = (double*)calloc(w, sizeof(double));
            for (int n = 0; n < N; n++) {
                const floatX* x = inp + (size_t)n * C + lo;
                const floatX* d = dout + (size_t)n * C + lo;
                float m = mean[n], r = rstd[n];
#pragma omp simd
                for (size_t i = 0; i < w; i++) aw[i] += ldx(d[i]) * ((ldx(x[i]) - m) * r);
            }
            for (size_t i = 0; i < w; i++) dweight[lo + i] = stx(ldx(dweight[lo + i]) + (float)aw[i]);
            free(aw);
            cpu_column_sum_add(dbias + lo, dout + lo, N, (size_t)C, w);
        }
    }
}

#endif /* LLMC_CPU_LAYERNORM_H */
